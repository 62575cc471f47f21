// This file holds Bootstrap: the system namespaces created once the API
// service answers, retried until then (`kplane bootstrap`).

package localcluster

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
)

// Bootstrap creates the system namespaces through conn, retrying every
// second (each attempt bounded to 5 s) until it succeeds or timeout has
// passed.
func Bootstrap(ctx context.Context, conn grpc.ClientConnInterface, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		err := CreateSystemNamespaces(actx, conn)
		acancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bootstrap: %w (last: %w)", ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}
