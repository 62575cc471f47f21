// This file tests what clients of the API service see once the store is
// compacted past a resourceVersion they hold.

package apiserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// TestCompactedResourceVersionIsGone: a list at exactly a compacted
// resourceVersion, and a watch from one the watch cache no longer holds, are
// 410 Gone with reason Expired, in kube-apiserver's words; a client that
// lists again then watches from the list's resourceVersion gets every change.
func TestCompactedResourceVersionIsGone(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.WatchWindow = 4 })
	ctx := admin(t)
	l, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	old := l.GetList().GetMetadata().GetResourceVersion()
	written := writes(t, e, "cmp", 6)
	last := written[len(written)-1].rv
	// (Not ctx: its outgoing "authorization" metadata is for the API service.)
	if _, err := e.srv.store.cli.Compact(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.cachers["configmaps"].waitFor(ctx, last); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		call    func() error
		wantMsg string
	}{
		{
			name: "list exactly at it",
			call: func() error {
				_, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default", ResourceVersion: old, ResourceVersionMatch: "Exact"})
				return err
			},
			wantMsg: "The resourceVersion for the provided list is too old.",
		},
		{
			name: "watch from it",
			call: func() error {
				st, err := e.cms.WatchConfigMaps(ctx, &corev1.WatchConfigMapsRequest{Namespace: "default", ResourceVersion: old})
				if err == nil {
					_, err = st.Recv()
				}
				return err
			},
			wantMsg: "too old resource version: " + old + " (",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			se := wantReason(t, err, apierrors.ReasonExpired)
			if !apierrors.IsGone(err) || se.Code != 410 {
				t.Errorf("got code %d (%v), want 410 Gone", se.Code, err)
			}
			if !strings.HasPrefix(se.Message, tt.wantMsg) {
				t.Errorf("message: got %q, want it to start with %q", se.Message, tt.wantMsg)
			}
		})
	}

	// Not older than it: any newer state will do, and is served.
	if _, err := e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default", ResourceVersion: old}); err != nil {
		t.Errorf("list not older than a compacted resourceVersion: %v", err)
	}

	// What an informer does on Gone: list again, watch from there.
	l, err = e.cms.ListConfigMaps(ctx, &corev1.ListConfigMapsRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.cms.WatchConfigMaps(ctx, &corev1.WatchConfigMapsRequest{Namespace: "default", ResourceVersion: l.GetList().GetMetadata().GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cms.CreateConfigMap(ctx, &corev1.CreateConfigMapRequest{Namespace: "default", ConfigMap: cm("after", nil)}); err != nil {
		t.Fatal(err)
	}
	got := recvN(t, st, 1, true)
	if got[0].typ != eventAdded || got[0].name != "after" {
		t.Errorf("after re-listing: got %v, want ADDED after", got)
	}
}

// TestCompactorStartsWithCompactionInterval: the service runs a compactor
// only when given an interval, and stops it with Run (newEnv's cleanup
// fails the test if Run does not return).
func TestCompactorStartsWithCompactionInterval(t *testing.T) {
	tests := []struct {
		name     string
		interval time.Duration
		want     bool
	}{
		{name: "off by default", interval: 0, want: false},
		{name: "on with an interval", interval: time.Hour, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.CompactionInterval = tt.interval })
			if got := e.srv.compactor != nil; got != tt.want {
				t.Errorf("compactor running: got %v, want %v", got, tt.want)
			}
		})
	}
}
