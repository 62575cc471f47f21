package replicaset

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
)

func timestamppbNow(t time.Time) *timestamppb.Timestamp {
	return timestamppb.New(t.Truncate(time.Second))
}
