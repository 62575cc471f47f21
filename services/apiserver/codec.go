// This file holds the server's gRPC codec: protobuf, plus responses already
// marshalled once and shared, such as watch events sent to many watchers.

package apiserver

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// preEncoded is a response message already in its protobuf wire form: a
// watch event sent to many watchers is marshalled once, not once per
// watcher. Its buffer is never returned to a pool (SliceBuffer's Free does
// nothing), so every stream can send the same one.
type preEncoded struct{ b mem.BufferSlice }

func newPreEncoded(b []byte) *preEncoded {
	return &preEncoded{b: mem.BufferSlice{mem.SliceBuffer(b)}}
}

// codec is the server's gRPC codec: protobuf, plus preEncoded messages
// written as they are. Clients see plain protobuf.
type codec struct{}

var _ encoding.CodecV2 = codec{}

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *preEncoded:
		return m.b, nil
	case proto.Message:
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return nil, fmt.Errorf("codec: cannot marshal %T", v)
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("codec: cannot unmarshal into %T", v)
	}
	b := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer b.Free()
	return proto.Unmarshal(b.ReadOnlyData(), m)
}

func (codec) Name() string { return "proto" }
