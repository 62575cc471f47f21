// This file holds the response header by which the ResourceService passes
// on a call's warnings (fields pruned from a custom object), as Kubernetes
// sends Warning HTTP headers.

package dynamicv1

// WarningHeader holds one warning per value in the response headers of a
// ResourceService call.
const WarningHeader = "kplane-warning"
