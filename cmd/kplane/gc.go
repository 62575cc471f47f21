// This file holds the components' garbage-collector targets: each command's
// --gc-percent default and how the flag is applied, yielding to GOGC when
// that is set.

package main

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// apiserverGCPercent is the API service's default GC target. Each
// collection scans every goroutine's stack, and a service with 10,000
// watches has 10,000 of them; at Go's default of 100 the 10,000-watcher
// fan-out collected often enough to lengthen its delivery tail (see
// BENCHMARKS.md, "API service"). The cost is heap headroom: the heap may
// grow to (1 + percent/100) times what is live before a collection.
const apiserverGCPercent = 300

// nodeAgentGCPercent is the node agent's default GC target: Go's own. With
// 100 simulated nodes and 3,000 pods (TestBenchManyNodes, 2026-11-23,
// BENCHMARKS.md "Density"), 200 and 400 showed no CPU saving within the
// run-to-run noise of a loaded machine (agent CPU over the ramp 5.7-6.2 s
// at 100, 6.6-7.7 s at 400), while the steady RSS grew from 210 to 290 and
// 440 MiB. The flag stays for a machine where collection does show.
const nodeAgentGCPercent = 100

// storeGCPercent is the store's default GC target: Go's own. A larger
// target did not pay on the put benchmark: at 300 the members used 5-10%
// more CPU per put than at 100 in each of four alternating rounds
// (BENCHMARKS.md, store section), the larger heap costing more fresh pages
// than the fewer collections saved; the store's live heap (every key's
// history in memory) already spaces collections out. The flag stays, as on
// the other commands, for operators who want to trade memory for fewer
// collections.
const storeGCPercent = 100

// setGCPercent applies a --gc-percent flag the way the runtime's own
// setting is expected to behave: GOGC in the environment, when set, wins
// (an operator's explicit choice), and GOMEMLIMIT, if set, still caps the
// heap. A negative percent turns the collector off, as GOGC=off does.
func setGCPercent(percent int, log *slog.Logger) {
	if v, ok := os.LookupEnv("GOGC"); ok {
		log.Info("GOGC is set in the environment: --gc-percent not applied", "GOGC", v, "gc-percent", percent)
		return
	}
	debug.SetGCPercent(percent)
}
