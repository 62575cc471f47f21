// This file holds the store's benchmarks: puts, puts under a watcher,
// single-key and prefix ranges.

package mvcc

import (
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// benchKeys returns n distinct 8-byte keys, as etcd's benchmark tool uses.
func benchKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "%08d", i)
	}
	return keys
}

// BenchmarkPut applies puts of 256-byte values over 10,000 keys, the shape of
// `benchmark put` against etcd.
func BenchmarkPut(b *testing.B) {
	s := New(Config{})
	defer s.Close()
	keys := benchKeys(10000)
	value := make([]byte, 256)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Put(&pb.PutRequest{Key: keys[i%len(keys)], Value: value}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPutWatched is BenchmarkPut with a prefix watcher on every key
// whose stream is drained concurrently.
func BenchmarkPutWatched(b *testing.B) {
	s := New(Config{})
	defer s.Close()
	ws := s.NewWatchStream()
	if _, err := ws.Watch(0, []byte{0}, []byte{0}, 0, WatchOptions{}); err != nil {
		b.Fatal(err)
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for range ws.Chan() {
		}
	}()
	keys := benchKeys(10000)
	value := make([]byte, 256)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Put(&pb.PutRequest{Key: keys[i%len(keys)], Value: value}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	ws.Close()
	<-drained
}

// BenchmarkRange reads single keys out of 10,000.
func BenchmarkRange(b *testing.B) {
	s := New(Config{})
	defer s.Close()
	keys := benchKeys(10000)
	value := make([]byte, 256)
	for _, k := range keys {
		if _, err := s.Put(&pb.PutRequest{Key: k, Value: value}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		resp, err := s.Range(&pb.RangeRequest{Key: keys[i%len(keys)]})
		if err != nil || len(resp.Kvs) != 1 {
			b.Fatalf("got %v, %v", resp, err)
		}
	}
}

// BenchmarkRangePrefix reads 100 keys at a time out of 10,000.
func BenchmarkRangePrefix(b *testing.B) {
	s := New(Config{})
	defer s.Close()
	keys := benchKeys(10000)
	value := make([]byte, 256)
	for _, k := range keys {
		if _, err := s.Put(&pb.PutRequest{Key: k, Value: value}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		prefix := fmt.Appendf(nil, "%06d", i%100)
		end := fmt.Appendf(nil, "%06d", i%100+1)
		resp, err := s.Range(&pb.RangeRequest{Key: prefix, RangeEnd: end})
		if err != nil || len(resp.Kvs) != 100 {
			b.Fatalf("got %d keys, %v", len(resp.Kvs), err)
		}
	}
}
