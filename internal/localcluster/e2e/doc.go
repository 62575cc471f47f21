// Package e2e holds the end-to-end tests of `kplane up`: the whole control
// plane run as separate processes of the real binary, driven by kubectl,
// etcd's client and `kplane status`/`kplane down`, its components killed
// and restarted. It has no non-test code.
package e2e
