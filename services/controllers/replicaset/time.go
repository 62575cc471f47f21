// This file holds the conversion of the controller's clock to a condition
// timestamp, truncated to the second as Kubernetes stores it.

package replicaset

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
)

func timestamppbNow(t time.Time) *timestamppb.Timestamp {
	return timestamppb.New(t.Truncate(time.Second))
}
