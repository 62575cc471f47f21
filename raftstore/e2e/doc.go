// Package e2e holds the store's end-to-end tests: real `kplane store`
// processes on loopback (started through internal/localcluster), driven by
// etcd's Go client and by the real etcdctl, killed with SIGKILL and
// restarted, backed up and restored. It has no non-test code.
package e2e
