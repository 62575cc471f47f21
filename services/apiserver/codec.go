package apiserver

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"
)

// preEncoded is a response message already in its protobuf wire form: a
// watch event sent to many watchers is marshalled once, not once per
// watcher.
type preEncoded struct{ b []byte }

// codec is the server's gRPC codec: protobuf, plus preEncoded messages
// written as they are. Clients see plain protobuf.
type codec struct{}

var _ encoding.Codec = codec{}

func (codec) Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case *preEncoded:
		return m.b, nil
	case proto.Message:
		return proto.Marshal(m)
	}
	return nil, fmt.Errorf("codec: cannot marshal %T", v)
}

func (codec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("codec: cannot unmarshal into %T", v)
	}
	return proto.Unmarshal(data, m)
}

func (codec) Name() string { return "proto" }
