#!/usr/bin/env bash
# Overload protection, measured on kplane and on Kubernetes side by side
# (issue 28): on a fresh cluster of each (`kplane up`; etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and KWOK, as scripts/bench-scale.sh
# starts them) with STEPS nodes, one ServiceAccount lists FLOOD_OBJECTS
# ConfigMaps of 1 kB (3 MB a list) unpaged from FLOOD_CLIENTS clients at
# once in a closed loop for DURATION — far past what two cores serve —
# while probes run every 100 ms: an administrator's get and list of
# namespaces, and another ServiceAccount's get of one ConfigMap (the same
# priority level as the flooder, another flow). It prints the probes'
# latency before and during the flood, the lists served and the 429s
# answered, how many nodes went NotReady and the oldest node Lease renewal
# seen, then one row per cluster (internal/scalebench, overload.go).
#
#   scripts/bench-overload.sh                       100 nodes, 100 clients, 1 minute
#   STEPS=500 FLOOD_CLIENTS=200 scripts/bench-overload.sh
#   RUNS=kplane scripts/bench-overload.sh           one side only
set -euo pipefail
cd "$(dirname "$0")/.."
export MODE=overload
export STEPS=${STEPS:-100}
export DURATION=${DURATION:-1m}
export FLOOD_CLIENTS=${FLOOD_CLIENTS:-100}
export FLOOD_OBJECTS=${FLOOD_OBJECTS:-3000}
exec scripts/bench-scale.sh
