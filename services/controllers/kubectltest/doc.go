// Package kubectltest holds the controllers' end-to-end test with the real
// kubectl (`kubectl rollout status`, `kubectl rollout restart`, `kubectl
// scale`, and DaemonSets: rollout status, history and undo) through the
// gateway; it has no non-test code.
package kubectltest
