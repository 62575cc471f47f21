// This file holds the traffic generator: concurrent clients, one request at
// a time each, recording every request in a History.

package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
)

// TrafficConfig shapes the client load.
type TrafficConfig struct {
	// Clients is the number of concurrent clients; each sends one request
	// at a time.
	Clients int
	// Rate bounds the requests per second of all clients together, which
	// bounds the history's length.
	Rate float64
	// MaxOps stops the traffic after this many requests (0: no bound but the
	// context).
	MaxOps int
	// RequestTimeout is every request's deadline.
	RequestTimeout time.Duration
	// PinnedReaders adds clients that only send linearizable gets, each to
	// one member alone (round robin over the endpoints): a member that
	// answers a default Range from its local state without confirming it is
	// up to date shows up as a stale read.
	PinnedReaders int
}

func (c TrafficConfig) withDefaults() TrafficConfig {
	if c.Clients == 0 {
		c.Clients = 6
	}
	if c.Rate == 0 {
		c.Rate = 200
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 2 * time.Second
	}
	return c
}

// NewClient returns an etcd client over the given endpoints that fails fast
// enough for a chaos test.
func NewClient(endpoints []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}

// RunTraffic sends the mixed workload — linearizable gets, puts, CAS
// transactions on mod_revision, deletes — over the history's key space until
// ctx ends or MaxOps requests were sent, recording every request in h. Each
// client owns an etcd client over all endpoints. Client IDs start at
// firstClient.
func RunTraffic(ctx context.Context, endpoints []string, h *History, cfg TrafficConfig, firstClient int) error {
	cfg = cfg.withDefaults()
	limiter := rate.NewLimiter(rate.Limit(cfg.Rate), 1)
	var (
		mu   sync.Mutex
		sent int
	)
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if cfg.MaxOps > 0 && sent >= cfg.MaxOps {
			return false
		}
		sent++
		return true
	}
	g, ctx := errgroup.WithContext(ctx)
	for c := range cfg.Clients + cfg.PinnedReaders {
		id := firstClient + c
		pinned := c >= cfg.Clients
		eps := endpoints
		if pinned {
			eps = []string{endpoints[(c-cfg.Clients)%len(endpoints)]}
		}
		cli, err := NewClient(eps)
		if err != nil {
			return err
		}
		g.Go(func() error {
			defer cli.Close()
			rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
			// lastMod remembers the mod_revision this client last saw per
			// key, so that its CAS transactions sometimes succeed.
			lastMod := make([]int64, len(h.Keys()))
			for seq := 0; ; seq++ {
				if err := limiter.Wait(ctx); err != nil || !take() {
					return nil
				}
				in := Input{Key: rng.IntN(len(h.Keys()))}
				switch p := rng.IntN(100); {
				case pinned || p < 40:
					in.Kind = OpGet
				case p < 65:
					in.Kind = OpPut
				case p < 85:
					in.Kind = OpCAS
					in.ExpectModRev = lastMod[in.Key]
				default:
					in.Kind = OpDelete
				}
				if in.Kind == OpPut || in.Kind == OpCAS {
					in.Value = fmt.Sprintf("c%d-%d", id, seq)
				}
				out := Do(ctx, cli, h, id, in, cfg.RequestTimeout)
				if in.Kind == OpGet && !out.Unknown {
					lastMod[in.Key] = out.ModRev
				}
				if ctx.Err() != nil {
					return nil
				}
			}
		})
	}
	return g.Wait()
}

// Do sends one request with the given deadline, records it in h and returns
// its output. Any error makes the outcome unknown.
func Do(ctx context.Context, cli *clientv3.Client, h *History, client int, in Input, timeout time.Duration) Output {
	key := h.Keys()[in.Key]
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	call := h.Now()
	var out Output
	var err error
	switch in.Kind {
	case OpGet:
		var resp *clientv3.GetResponse
		resp, err = cli.Get(rctx, key)
		if err == nil {
			out.Revision = resp.Header.Revision
			if len(resp.Kvs) > 0 {
				out.Found = true
				out.Value = string(resp.Kvs[0].Value)
				out.ModRev = resp.Kvs[0].ModRevision
			}
		}
	case OpPut:
		var resp *clientv3.PutResponse
		resp, err = cli.Put(rctx, key, in.Value)
		if err == nil {
			out.Revision = resp.Header.Revision
		}
	case OpDelete:
		var resp *clientv3.DeleteResponse
		resp, err = cli.Delete(rctx, key)
		if err == nil {
			out.Revision = resp.Header.Revision
			out.Deleted = resp.Deleted
		}
	case OpCAS:
		var resp *clientv3.TxnResponse
		resp, err = cli.Txn(rctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", in.ExpectModRev)).
			Then(clientv3.OpPut(key, in.Value)).
			Commit()
		if err == nil {
			out.Revision = resp.Header.Revision
			out.Succeeded = resp.Succeeded
		}
	}
	ret := h.Now()
	if err != nil {
		out = Output{Unknown: true}
		h.noteErr(err)
	}
	h.Add(Record{Client: client, Input: in, Output: out, Call: call, Return: ret})
	return out
}
