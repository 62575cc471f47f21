// Package chaos holds the control plane's chaos test: a `kplane up` cluster
// (every component its own process, through internal/localcluster) takes
// SIGKILLs of the store's Raft leader and of the active scheduler and
// controller manager (or stalls of the latter until they lose their Lease),
// which kplane up's supervisor must restart, while a workload creates,
// scales and deletes
// Deployments through the API service. The test checks that every
// Deployment converges to its replicas Running, that no acknowledged object
// is lost, and that a client's resumed watch streams match the store's
// event stream (raftstore/robustness's checker), and it measures write
// unavailability per kill. See README.md for the knobs and the soak.
package chaos
