// This file holds the nominator: the pending pods for which preemption
// made room on a node (their status.nominatedNodeName), which the filters
// count on that node for pods of no higher priority.
package scheduler

import (
	"sync"

	"github.com/kplane/kplane/services/scheduler/framework"
)

type nomination struct {
	pod  *framework.PodInfo
	node string
}

// nominator is safe for concurrent use: informer handlers write it, the
// scheduling goroutine reads it.
type nominator struct {
	mu    sync.Mutex
	byKey map[string]nomination
}

func newNominator() *nominator { return &nominator{byKey: map[string]nomination{}} }

// set nominates pi to node; an empty node removes the nomination.
func (n *nominator) set(pi *framework.PodInfo, node string) {
	if node == "" {
		n.remove(pi.Key)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.byKey[pi.Key] = nomination{pod: pi, node: node}
}

// remove forgets the pod with key (bound, assumed or gone).
func (n *nominator) remove(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.byKey, key)
}

// forPod returns, by node, the nominated pods whose priority is at least
// pi's, pi excepted (framework.CycleState.Nominated); nil if none.
func (n *nominator) forPod(pi *framework.PodInfo) map[string][]*framework.PodInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.byKey) == 0 {
		return nil
	}
	var out map[string][]*framework.PodInfo
	for key, nom := range n.byKey {
		if key == pi.Key || nom.pod.Priority < pi.Priority {
			continue
		}
		if out == nil {
			out = map[string][]*framework.PodInfo{}
		}
		out[nom.node] = append(out[nom.node], nom.pod)
	}
	return out
}
