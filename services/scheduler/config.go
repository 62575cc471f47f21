// This file holds the scheduler's config file: its schema, and the profile
// it makes, the default plugins or an explicit list (each with its args)
// minus the disabled ones, with weights overridden.

package scheduler

import (
	"fmt"
	"os"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/kplane/kplane/services/scheduler/framework"
	"github.com/kplane/kplane/services/scheduler/plugins"
)

// FileConfig is the scheduler's config file (YAML or JSON):
//
//	schedulerName: default-scheduler
//	percentageOfNodesToScore: 0   # 0: Kubernetes' adaptive default
//	parallelism: 16
//	plugins:                      # if set, exactly these, in this order
//	  - {name: NodeResourcesFit}
//	disabledPlugins: [ImageLocality]   # removed from the default list
//	weights: {NodeAffinity: 5}         # override default score weights
type FileConfig struct {
	SchedulerName            string                `json:"schedulerName,omitempty"`
	PercentageOfNodesToScore int32                 `json:"percentageOfNodesToScore,omitempty"`
	Parallelism              int                   `json:"parallelism,omitempty"`
	Plugins                  []framework.PluginRef `json:"plugins,omitempty"`
	DisabledPlugins          []string              `json:"disabledPlugins,omitempty"`
	Weights                  map[string]int64      `json:"weights,omitempty"`
}

// LoadConfigFile reads a FileConfig; an empty path gives the defaults.
func LoadConfigFile(path string) (FileConfig, error) {
	var fc FileConfig
	if path == "" {
		return fc, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fc, fmt.Errorf("scheduler: read config: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, &fc); err != nil {
		return fc, fmt.Errorf("scheduler: parse config %s: %w", path, err)
	}
	return fc, nil
}

// Profile turns fc into the framework's profile: the default plugins
// (or fc.Plugins), minus the disabled ones, with weights overridden.
func (fc FileConfig) Profile() (framework.Config, error) {
	refs := fc.Plugins
	if len(refs) == 0 {
		refs = plugins.DefaultPlugins()
	}
	refs = slices.DeleteFunc(slices.Clone(refs), func(r framework.PluginRef) bool { return slices.Contains(fc.DisabledPlugins, r.Name) })
	for name, w := range fc.Weights {
		i := slices.IndexFunc(refs, func(r framework.PluginRef) bool { return r.Name == name })
		if i < 0 {
			return framework.Config{}, fmt.Errorf("scheduler: weight for %q, which is not enabled", name)
		}
		refs[i].Weight = w
	}
	return framework.Config{Plugins: refs, PercentageOfNodesToScore: fc.PercentageOfNodesToScore, Parallelism: fc.Parallelism}, nil
}
