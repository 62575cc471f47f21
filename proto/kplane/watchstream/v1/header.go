// This file holds the response header by which StreamWatch says its watch
// is established (before any event), so that a client can tell an
// established watch from a call that failed while its headers, such as the
// audit ID, were already on their way.

package watchstreamv1

// EstablishedHeader is set ("true") in the response headers of a
// StreamWatch (and of the typed watch calls) once the watch is established.
const EstablishedHeader = "kplane-watch-established"
