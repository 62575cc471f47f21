// Package plugins lists the in-tree scheduler plugins (each in its own
// package below this one) and the default profile.
package plugins

import (
	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/plugins/balancedallocation"
	"github.com/kplane/kplane/services/scheduler/plugins/defaultbinder"
	"github.com/kplane/kplane/services/scheduler/plugins/defaultpreemption"
	"github.com/kplane/kplane/services/scheduler/plugins/imagelocality"
	"github.com/kplane/kplane/services/scheduler/plugins/interpodaffinity"
	"github.com/kplane/kplane/services/scheduler/plugins/leastallocated"
	"github.com/kplane/kplane/services/scheduler/plugins/nodeaffinity"
	"github.com/kplane/kplane/services/scheduler/plugins/nodename"
	"github.com/kplane/kplane/services/scheduler/plugins/nodeports"
	"github.com/kplane/kplane/services/scheduler/plugins/nodeready"
	"github.com/kplane/kplane/services/scheduler/plugins/noderesourcesfit"
	"github.com/kplane/kplane/services/scheduler/plugins/nodeunschedulable"
	"github.com/kplane/kplane/services/scheduler/plugins/ownerspread"
	"github.com/kplane/kplane/services/scheduler/plugins/podtopologyspread"
	"github.com/kplane/kplane/services/scheduler/plugins/tainttoleration"
	"github.com/kplane/kplane/services/scheduler/plugins/volumebinding"
)

// Registry returns a fresh registry of every in-tree plugin.
func Registry() framework.Registry {
	return framework.Registry{
		nodeunschedulable.Name:  nodeunschedulable.New,
		nodename.Name:           nodename.New,
		nodeready.Name:          nodeready.New,
		noderesourcesfit.Name:   noderesourcesfit.New,
		nodeports.Name:          nodeports.New,
		nodeaffinity.Name:       nodeaffinity.New,
		tainttoleration.Name:    tainttoleration.New,
		leastallocated.Name:     leastallocated.New,
		balancedallocation.Name: balancedallocation.New,
		imagelocality.Name:      imagelocality.New,
		ownerspread.Name:        ownerspread.New,
		defaultbinder.Name:      defaultbinder.New,
		defaultpreemption.Name:  defaultpreemption.New,
		volumebinding.Name:      volumebinding.New,
		interpodaffinity.Name:   interpodaffinity.New,
		podtopologyspread.Name:  podtopologyspread.New,
	}
}

// DefaultPlugins is the default profile, in execution order, with
// Kubernetes' default score weights. Cheap filters come first, since a
// node's filters stop at the first rejection.
func DefaultPlugins() []framework.PluginRef {
	return []framework.PluginRef{
		{Name: nodeunschedulable.Name},
		{Name: nodename.Name},
		{Name: nodeready.Name},
		{Name: tainttoleration.Name, Weight: 3},
		{Name: nodeaffinity.Name, Weight: 2},
		{Name: nodeports.Name},
		{Name: noderesourcesfit.Name},
		{Name: volumebinding.Name},
		{Name: podtopologyspread.Name, Weight: 2},
		{Name: interpodaffinity.Name, Weight: 2},
		{Name: leastallocated.Name, Weight: 1},
		{Name: balancedallocation.Name, Weight: 1},
		{Name: imagelocality.Name, Weight: 1},
		{Name: ownerspread.Name, Weight: 2},
		{Name: defaultpreemption.Name},
		{Name: defaultbinder.Name},
	}
}
