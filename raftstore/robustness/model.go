// This file holds the porcupine model of the etcd KV that the chaos
// histories are checked against.

package robustness

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
)

// MaxKeys bounds the key space the model tracks. A small fixed key space keeps
// the model state a comparable value (cheap to copy, hash and compare), which
// is what makes porcupine fast on histories of thousands of operations.
const MaxKeys = 8

// OpKind names the four requests the traffic generator sends.
type OpKind uint8

// The operations of the etcd KV that the model understands.
const (
	// OpGet is a linearizable (default) Range of one key.
	OpGet OpKind = iota + 1
	// OpPut is a Put of one key.
	OpPut
	// OpDelete is a DeleteRange of one key.
	OpDelete
	// OpCAS is a Txn: if mod_revision(key) == ExpectModRev then Put else nothing.
	OpCAS
)

func (k OpKind) String() string {
	switch k {
	case OpGet:
		return "get"
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpCAS:
		return "cas"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Input is one request as the model sees it. Key is an index into the
// history's key space, not the key itself.
type Input struct {
	Kind         OpKind
	Key          int
	Value        string // OpPut, OpCAS
	ExpectModRev int64  // OpCAS
}

// Output is what the store answered. Unknown means the request failed in a
// way that leaves its outcome open (timeout, lost leadership, connection
// reset): the model lets it take effect at any point after its call, or —
// because porcupine may put it after everything else — not at all.
type Output struct {
	Unknown bool
	// Revision is the response header's revision. For an unknown write that
	// the final event stream shows was applied, it is the revision it was
	// applied at (see ResolveUnknown); otherwise zero.
	Revision  int64
	Found     bool   // OpGet
	Value     string // OpGet
	ModRev    int64  // OpGet
	Deleted   int64  // OpDelete
	Succeeded bool   // OpCAS
}

type keyState struct {
	exists bool
	value  string
	modRev int64
}

// kvState is the model's state: every tracked key and the store revision.
// It is a comparable value so that porcupine can hash and compare it.
type kvState struct {
	rev  int64
	keys [MaxKeys]keyState
}

// Model returns the porcupine model of the etcd KV restricted to single-key
// Range, Put, DeleteRange and a compare-mod_revision-then-Put Txn.
//
// With strictRevisions the model checks every response's header revision
// exactly (a write that changes the store bumps the revision by one; a read
// or a no-op returns the current revision); this requires that every write
// to the store is in the history. Without it, revisions need only grow along
// the linearization, which allows writes outside the history (for example a
// burst that forces a member to catch up from a snapshot).
//
// initialRev is the store's revision when the history starts (1 for a new
// etcd), with every key of the key space absent.
func Model(strictRevisions bool, initialRev int64) porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return kvState{rev: initialRev} },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			return step(strictRevisions, state.(kvState), input.(Input), output.(Output))
		},
		Equal: func(a, b interface{}) bool { return a.(kvState) == b.(kvState) },
		Hash: func(state interface{}) uint64 {
			// FNV-1a over the fields, by hand: porcupine hashes states in
			// its inner loop.
			s := state.(kvState)
			h := uint64(14695981039346656037)
			mix := func(v uint64) {
				for range 8 {
					h ^= v & 0xff
					h *= 1099511628211
					v >>= 8
				}
			}
			mix(uint64(s.rev))
			for _, k := range s.keys {
				mix(uint64(k.modRev))
				if k.exists {
					mix(1)
				}
				for i := 0; i < len(k.value); i++ {
					h ^= uint64(k.value[i])
					h *= 1099511628211
				}
			}
			return h
		},
		DescribeOperation: func(input, output interface{}) string {
			return describe(input.(Input), output.(Output))
		},
		DescribeState: func(state interface{}) string {
			s := state.(kvState)
			var b strings.Builder
			fmt.Fprintf(&b, "rev=%d", s.rev)
			for i, k := range s.keys {
				if k.exists {
					fmt.Fprintf(&b, " k%d=%q@%d", i, k.value, k.modRev)
				}
			}
			return b.String()
		},
	}
}

// step applies one operation to the state. It reports whether the output is
// a possible answer from that state.
func step(strict bool, s kvState, in Input, out Output) (bool, kvState) {
	k := s.keys[in.Key]
	// nextRev is the revision a state-changing write gets; revOK checks a
	// write's reported revision.
	nextRev := func() (int64, bool) {
		if out.Revision == 0 { // unknown outcome, revision not learned
			if strict {
				return s.rev + 1, true
			}
			return s.rev, true
		}
		if strict {
			return s.rev + 1, out.Revision == s.rev+1
		}
		return out.Revision, out.Revision > s.rev
	}
	readRevOK := func() bool {
		if out.Unknown {
			return true
		}
		if strict {
			return out.Revision == s.rev
		}
		return out.Revision >= s.rev
	}
	switch in.Kind {
	case OpGet:
		if out.Unknown {
			return true, s
		}
		if out.Found != k.exists || (k.exists && (out.Value != k.value || out.ModRev != k.modRev)) {
			return false, s
		}
		if !readRevOK() {
			return false, s
		}
		s.rev = max(s.rev, out.Revision)
		return true, s
	case OpPut:
		rev, ok := nextRev()
		if !ok {
			return false, s
		}
		s.rev = rev
		s.keys[in.Key] = keyState{exists: true, value: in.Value, modRev: rev}
		return true, s
	case OpDelete:
		if !k.exists {
			if !out.Unknown && (out.Deleted != 0 || !readRevOK()) {
				return false, s
			}
			s.rev = max(s.rev, out.Revision)
			return true, s
		}
		if !out.Unknown && out.Deleted != 1 {
			return false, s
		}
		rev, ok := nextRev()
		if !ok {
			return false, s
		}
		s.rev = rev
		s.keys[in.Key] = keyState{}
		return true, s
	case OpCAS:
		cur := int64(0)
		if k.exists {
			cur = k.modRev
		}
		if cur != in.ExpectModRev {
			if out.Unknown {
				// A CAS whose compare failed changes nothing, whatever the
				// client saw.
				return out.Revision == 0, s
			}
			if out.Succeeded || !readRevOK() {
				return false, s
			}
			s.rev = max(s.rev, out.Revision)
			return true, s
		}
		if !out.Unknown && !out.Succeeded {
			return false, s
		}
		rev, ok := nextRev()
		if !ok {
			return false, s
		}
		s.rev = rev
		s.keys[in.Key] = keyState{exists: true, value: in.Value, modRev: rev}
		return true, s
	}
	return false, s
}

func describe(in Input, out Output) string {
	var call string
	switch in.Kind {
	case OpGet:
		call = fmt.Sprintf("get(k%d)", in.Key)
	case OpPut:
		call = fmt.Sprintf("put(k%d, %q)", in.Key, in.Value)
	case OpDelete:
		call = fmt.Sprintf("delete(k%d)", in.Key)
	case OpCAS:
		call = fmt.Sprintf("cas(k%d, mod=%d, %q)", in.Key, in.ExpectModRev, in.Value)
	default:
		call = in.Kind.String()
	}
	if out.Unknown {
		if out.Revision != 0 {
			return fmt.Sprintf("%s -> unknown, applied@%d", call, out.Revision)
		}
		return call + " -> unknown"
	}
	switch in.Kind {
	case OpGet:
		if !out.Found {
			return fmt.Sprintf("%s -> none @%d", call, out.Revision)
		}
		return fmt.Sprintf("%s -> %q mod=%d @%d", call, out.Value, out.ModRev, out.Revision)
	case OpDelete:
		return fmt.Sprintf("%s -> deleted=%d @%d", call, out.Deleted, out.Revision)
	case OpCAS:
		return fmt.Sprintf("%s -> ok=%t @%d", call, out.Succeeded, out.Revision)
	}
	return fmt.Sprintf("%s -> @%d", call, out.Revision)
}
