// This file holds the store's put benchmark through a 3-member in-process
// cluster.

package raftstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkPut measures puts through a 3-member in-process cluster from 100
// concurrent clients over 10 connections spread over the members, like
// etcd's `benchmark put --conns=10 --clients=100`.
func BenchmarkPut(b *testing.B) {
	c := newCluster(b, 3, clusterOptions{})
	var eps []string
	for _, m := range c.members {
		eps = append(eps, strings.TrimPrefix(m.cfg.ListenClientURLs[0], "http://"))
	}
	var conns []*clientv3.Client
	for i := 0; i < 10; i++ {
		conns = append(conns, newClient(b, eps[i%3]))
	}
	val := strings.Repeat("v", 256)
	var n atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := 0; w < 100; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli := conns[w%10]
			for {
				i := n.Add(1)
				if i > int64(b.N) {
					return
				}
				if _, err := cli.Put(context.Background(), fmt.Sprintf("k%07d", i), val); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
