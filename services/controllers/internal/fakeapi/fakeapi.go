// Package fakeapi is a small in-memory stand-in for the API service for
// controllers' unit tests: informers over fixed object lists, and typed
// clients that record every write. Not for integration tests (those use
// services/apiserver/apiservertest).
package fakeapi

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/services/client"
)

type lw[T proto.Message] struct{ items []T }

func (l *lw[T]) List(context.Context) ([]T, string, error) { return l.items, "1", nil }
func (l *lw[T]) Watch(ctx context.Context, _ string) (client.Watch[T], error) {
	return &idle[T]{ctx: ctx}, nil
}

type idle[T proto.Message] struct{ ctx context.Context }

func (w *idle[T]) Next() (client.Event[T], error) {
	<-w.ctx.Done()
	return client.Event[T]{}, w.ctx.Err()
}
func (w *idle[T]) Close() {}

// Informer returns an informer whose cache holds items; Start runs it.
func Informer[T proto.Message](items []T, opts client.InformerOptions[T]) *client.Informer[T] {
	return client.NewInformer[T](&lw[T]{items: items}, opts)
}

// Start runs informers until the test ends and waits for their caches.
func Start(t *testing.T, run ...interface {
	Run(context.Context) error
	HasSynced() bool
}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, r := range run {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = r.Run(ctx)
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	syncers := make([]client.Syncer, len(run))
	for i, r := range run {
		syncers[i] = r
	}
	if !client.WaitForCacheSync(ctx, syncers...) {
		t.Fatal("caches did not sync")
	}
}

// Action is one recorded write.
type Action struct {
	Verb string // create, update, updateStatus, finalize, delete
	Key  string // namespace/name (generateName+"*" for generated names)
	Obj  proto.Message
}

func (a Action) String() string { return a.Verb + " " + a.Key }

// Client records writes to one resource; every write succeeds unless Fail
// says otherwise.
type Client[T proto.Message] struct {
	mu      sync.Mutex
	Actions []Action
	// Fail, if set, may fail a write (verb, object key).
	Fail func(verb, key string) error
	n    int
}

func (c *Client[T]) record(verb string, key string, obj T) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Fail != nil {
		if err := c.Fail(verb, key); err != nil {
			var zero T
			return zero, err
		}
	}
	c.Actions = append(c.Actions, Action{Verb: verb, Key: key, Obj: obj})
	return obj, nil
}

func keyOf(obj proto.Message) string {
	if client.Name(obj) == "" {
		return client.Namespace(obj) + "/" + genName(obj) + "*"
	}
	return client.Key(obj)
}

func genName(obj proto.Message) string {
	m := obj.ProtoReflect()
	md := m.Descriptor().Fields().ByName("metadata")
	if md == nil {
		return ""
	}
	meta := m.Get(md).Message()
	return meta.Get(meta.Descriptor().Fields().ByName("generate_name")).String()
}

// Create records a create.
func (c *Client[T]) Create(_ context.Context, obj T) (T, error) {
	return c.record("create", keyOf(obj), obj)
}

// Update records an update.
func (c *Client[T]) Update(_ context.Context, obj T) (T, error) {
	return c.record("update", keyOf(obj), obj)
}

// UpdateStatus records a status update.
func (c *Client[T]) UpdateStatus(_ context.Context, obj T) (T, error) {
	return c.record("updateStatus", keyOf(obj), obj)
}

// Finalize records a finalize (namespaces/finalize).
func (c *Client[T]) Finalize(_ context.Context, obj T) (T, error) {
	return c.record("finalize", keyOf(obj), obj)
}

// Delete records a delete.
func (c *Client[T]) Delete(_ context.Context, namespace, name string, _ client.DeleteOptions) error {
	var zero T
	_, err := c.record("delete", client.KeyOf(namespace, name), zero)
	return err
}

// Get always fails: tests that need reads use informers.
func (c *Client[T]) Get(_ context.Context, namespace, name string) (T, error) {
	var zero T
	return zero, fmt.Errorf("fakeapi: Get %s/%s not supported", namespace, name)
}

// Verbs lists the recorded actions as "verb key" strings.
func (c *Client[T]) Verbs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.Actions))
	for i, a := range c.Actions {
		out[i] = a.String()
	}
	return out
}
