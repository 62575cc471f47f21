// This file holds the member's leadership check: hashicorp/raft's
// VerifyLeader, made to end when the node closes.

package raftnode

import (
	"reflect"

	"github.com/hashicorp/raft"
)

// VerifyLeader confirms with a quorum that this member still leads, as
// raft.VerifyLeader does. hashicorp/raft answers every round it takes up,
// but a round still queued when Raft shuts down (its queue is buffered, and
// a request can be queued as shutdown begins) is never answered, and its
// caller would wait for ever; here the wait also ends, with
// raft.ErrRaftShutdown, when the node closes.
func (n *Node) VerifyLeader() error {
	f := n.Raft.VerifyLeader()
	setShutdownCh(f, n.closed)
	return f.Error()
}

// setShutdownCh gives a raft future the channel whose closing ends its
// wait, and says whether it could. hashicorp/raft's futures carry that
// channel in an exported field (ShutdownCh) that raft itself sets on some
// of them and not on the verify future; the field is set through
// reflection because the future's type is not exported.
// TestSetShutdownCh fails if a raft upgrade moves the field.
func setShutdownCh(f raft.Future, ch chan struct{}) bool {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return false
	}
	fld := v.Elem().FieldByName("ShutdownCh")
	if !fld.IsValid() || !fld.CanSet() || fld.Type() != reflect.TypeOf(ch) || !fld.IsNil() {
		return false
	}
	fld.Set(reflect.ValueOf(ch))
	return true
}
