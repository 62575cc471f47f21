// This file turns a container's environment and an image's name into the
// rules the simulation follows (see the package documentation).

package simruntime

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/distribution/reference"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Names of the rules read from a container's environment.
const (
	EnvRunSeconds        = "KPLANE_SIM_RUN_SECONDS"
	EnvExitCode          = "KPLANE_SIM_EXIT_CODE"
	EnvLog               = "KPLANE_SIM_LOG"
	EnvExecExitCode      = "KPLANE_SIM_EXEC_EXIT_CODE"
	EnvReadyAfterSeconds = "KPLANE_SIM_READY_AFTER_SECONDS"
	EnvIgnoreSIGTERM     = "KPLANE_SIM_IGNORE_SIGTERM"
	// EnvCPUUsage and EnvMemoryUsage declare the usage ContainerStats
	// reports while the container runs (a Kubernetes quantity: "250m"
	// cores, "64Mi" bytes): the simulation uses no CPU or memory of its
	// own, so without them a container reports zero.
	EnvCPUUsage    = "KPLANE_SIM_CPU_USAGE"
	EnvMemoryUsage = "KPLANE_SIM_MEMORY_USAGE"
)

// AnnotationSandboxError on a pod sandbox makes RunPodSandbox fail with its
// value as the message.
const AnnotationSandboxError = "sim.kplane.io/run-pod-sandbox-error"

// NotFoundMarker in an image's repository path makes its pull fail with
// NotFound.
const NotFoundMarker = "notfound"

// Exit codes of a stopped container.
const (
	exitCodeSIGTERM = 128 + 15
	exitCodeSIGKILL = 128 + 9
)

// containerRules is what a container's environment asks of the simulation.
// It is kept small: one per simulated container.
type containerRules struct {
	exits         bool          // exits by itself after runFor
	runFor        time.Duration // from start to exit, when exits
	exitCode      int32         // when exits
	execExitCode  int32
	readyAfter    time.Duration
	ignoreSIGTERM bool
	cpuNanoCores  uint64 // declared CPU usage
	memoryBytes   uint64 // declared working set
}

// parseContainerRules reads the rules from envs. An unparsable value is an
// error so that a typo in a manifest shows as CreateContainerError instead
// of silently running with a default. logLines is the KPLANE_SIM_LOG text
// split into lines, to be written at start.
func parseContainerRules(envs []*runtimeapi.KeyValue) (r containerRules, logLines []string, err error) {
	var runSet, exitSet bool
	for _, kv := range envs {
		switch kv.GetKey() {
		case EnvRunSeconds:
			d, err := parseSeconds(kv.GetValue())
			if err != nil {
				return r, nil, fmt.Errorf("%s: %w", EnvRunSeconds, err)
			}
			r.runFor, runSet = d, true
		case EnvExitCode:
			c, err := parseExitCode(kv.GetValue())
			if err != nil {
				return r, nil, fmt.Errorf("%s: %w", EnvExitCode, err)
			}
			r.exitCode, exitSet = c, true
		case EnvLog:
			logLines = strings.Split(strings.TrimSuffix(kv.GetValue(), "\n"), "\n")
		case EnvExecExitCode:
			c, err := parseExitCode(kv.GetValue())
			if err != nil {
				return r, nil, fmt.Errorf("%s: %w", EnvExecExitCode, err)
			}
			r.execExitCode = c
		case EnvReadyAfterSeconds:
			d, err := parseSeconds(kv.GetValue())
			if err != nil {
				return r, nil, fmt.Errorf("%s: %w", EnvReadyAfterSeconds, err)
			}
			r.readyAfter = d
		case EnvIgnoreSIGTERM:
			b, err := strconv.ParseBool(kv.GetValue())
			if err != nil {
				return r, nil, fmt.Errorf("%s: want true or false: %w", EnvIgnoreSIGTERM, err)
			}
			r.ignoreSIGTERM = b
		case EnvCPUUsage:
			q, err := parseUsage(kv.GetValue())
			if err != nil {
				return r, nil, fmt.Errorf("%s: %w", EnvCPUUsage, err)
			}
			r.cpuNanoCores = uint64(q.ScaledValue(resource.Nano))
		case EnvMemoryUsage:
			q, err := parseUsage(kv.GetValue())
			if err != nil {
				return r, nil, fmt.Errorf("%s: %w", EnvMemoryUsage, err)
			}
			r.memoryBytes = uint64(q.Value())
		}
	}
	r.exits = runSet || exitSet
	return r, logLines, nil
}

func parseSeconds(s string) (time.Duration, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) || f > 1e9 {
		return 0, fmt.Errorf("want a non-negative number of seconds, got %q", s)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// parseUsage reads a declared usage: a non-negative quantity.
func parseUsage(s string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(strings.TrimSpace(s))
	if err != nil || q.Sign() < 0 {
		return resource.Quantity{}, fmt.Errorf("want a non-negative quantity, got %q", s)
	}
	return q, nil
}

func parseExitCode(s string) (int32, error) {
	c, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || c < 0 || c > 255 {
		return 0, fmt.Errorf("want an exit code from 0 to 255, got %q", s)
	}
	return int32(c), nil
}

// pullLatencyTag matches a tag ending in "pull-<duration>".
var pullLatencyTag = regexp.MustCompile(`(?:^|[-_.])pull-([0-9]+(?:\.[0-9]+)?(?:ns|us|ms|s|m|h))$`)

// imageRules is what an image's name asks of a pull.
type imageRules struct {
	notFound   bool
	latency    time.Duration
	hasLatency bool
}

// parseImage normalises ref as containerd does ("nginx" becomes
// "docker.io/library/nginx:latest") and reads the image rules from it.
func parseImage(ref string) (reference.Named, imageRules, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, imageRules{}, fmt.Errorf("parse image reference %q: %w", ref, err)
	}
	named = reference.TagNameOnly(named)
	var r imageRules
	r.notFound = strings.Contains(reference.Path(named), NotFoundMarker)
	if t, ok := named.(reference.Tagged); ok {
		if m := pullLatencyTag.FindStringSubmatch(t.Tag()); m != nil {
			d, err := time.ParseDuration(m[1])
			if err == nil {
				r.latency, r.hasLatency = d, true
			}
		}
	}
	return named, r, nil
}
