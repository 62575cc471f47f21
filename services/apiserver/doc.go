// Package apiserver is kplane's API service: typed Kubernetes resources over
// gRPC, stored in an etcd v3 store (etcd itself or the kplane store) under
// kube-apiserver's keys (/registry/<resource>/<namespace>/<name>, with its
// exceptions) in its protobuf envelope, so that each reads the other's
// objects, with Kubernetes'
// optimistic concurrency (resourceVersion = the store's mod_revision),
// authentication, authorization, admission, validation, list with selectors
// and pagination, and a watch multiplexer that fans one store watch per
// resource out to any number of clients.
package apiserver
