// This file holds the kubectl tests of events.k8s.io/v1 Event: written
// through one group and read, patched, listed and deleted through the other,
// printed in Tables, by kubectl events, and refused as Kubernetes refuses.

package gateway_test

import (
	"fmt"
	"strings"
	"testing"
)

const eventsV1YAML = `apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: %s
  labels: {set: a}
regarding: {kind: Pod, namespace: default, name: mypod}
eventTime: "2026-01-01T00:00:00.000000Z"
note: This is %s
action: Do
reason: Test
type: Normal
reportingController: test-controller
reportingInstance: test-node
`

func TestKubectlEventsAPI(t *testing.T) {
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := startKube(t, bin)
			k.ok([]string{"create", "-f", k.file("e1.yaml", fmt.Sprintf(eventsV1YAML, "e1", "e1"))}, "event.events.k8s.io/e1 created")
			k.ok([]string{"create", "-f", k.file("e2.yaml", fmt.Sprintf(eventsV1YAML, "e2", "e2"))}, "event.events.k8s.io/e2 created")

			// The same objects through both groups.
			k.ok([]string{"get", "events.events.k8s.io"}, "LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE", "Test", "pod/mypod", "This is e1")
			k.ok([]string{"get", "events.v1.events.k8s.io", "e1", "-o", "jsonpath={.apiVersion} {.note} {.regarding.name} {.reportingController}"},
				"events.k8s.io/v1 This is e1 mypod test-controller")
			k.ok([]string{"get", "events", "e1", "-o", "jsonpath={.apiVersion} {.message} {.involvedObject.name} {.reportingComponent}"},
				"v1 This is e1 mypod test-controller")
			k.ok([]string{"events"}, "Test", "Pod/mypod", "This is e2")
			// A watch through events.k8s.io (the API service's JSON watch
			// stream) converts each event.
			k.ok([]string{"get", "--raw", "/apis/events.k8s.io/v1/namespaces/default/events?watch=1&timeoutSeconds=1"},
				`"type":"ADDED"`, `"apiVersion":"events.k8s.io/v1"`, `"note":"This is e1"`, `"regarding":{`)
			k.ok([]string{"api-resources", "--api-group=events.k8s.io"}, "events", "events.k8s.io/v1", "Event")

			// A patch through events.k8s.io, seen through core/v1.
			k.ok([]string{"patch", "events.events.k8s.io", "e1", "--type=merge", "-p", `{"series":{"count":2,"lastObservedTime":"2026-01-01T00:00:05.000000Z"}}`},
				"event.events.k8s.io/e1 patched")
			k.ok([]string{"get", "events", "e1", "-o", "jsonpath={.series.count}"}, "2")
			// Immutable through events.k8s.io, not through core/v1.
			k.fails([]string{"patch", "events.events.k8s.io", "e1", "--type=merge", "-p", `{"note":"changed"}`}, "message: Invalid value: \"changed\": field is immutable")
			k.ok([]string{"patch", "events", "e1", "--type=merge", "-p", `{"message":"changed"}`}, "event/e1 patched")
			k.ok([]string{"get", "events.events.k8s.io", "e1", "-o", "jsonpath={.note}"}, "changed")

			// events.k8s.io requires what core/v1 does not.
			bad := strings.Replace(fmt.Sprintf(eventsV1YAML, "bad", "bad"), "eventTime: \"2026-01-01T00:00:00.000000Z\"\n", "", 1)
			k.fails([]string{"create", "-f", k.file("bad.yaml", bad)}, "eventTime: Required value")

			// Field selectors in each group's names.
			k.ok([]string{"get", "events.events.k8s.io", "--field-selector", "reportingController=test-controller", "-o", "name"}, "event.events.k8s.io/e1")
			k.fails([]string{"get", "events.events.k8s.io", "--field-selector", "source=test-controller"}, "field label not supported: source")

			k.ok([]string{"delete", "events.events.k8s.io", "-l", "set=a"}, `event.events.k8s.io "e1" deleted`, `event.events.k8s.io "e2" deleted`)
			if out := k.ok([]string{"get", "events", "-o", "name"}); strings.Contains(out, "e1") || strings.Contains(out, "e2") {
				t.Errorf("after delete: got\n%s\nwant no e1 or e2", out)
			}
		})
	}
}
