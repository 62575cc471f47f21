// This file holds the tests of events.k8s.io/v1 Event as a view of core/v1
// Event: an event written through either group is read, listed, selected
// and watched through the other, and each group refuses what Kubernetes'
// validation refuses through it.

package apiserver

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	eventsv1 "github.com/kplane/kplane/proto/kplane/events/v1"
)

// newV1Event is an events.k8s.io/v1 Event as Kubernetes' conformance test
// writes one.
func newV1Event(ns, name string) *eventsv1.Event {
	return &eventsv1.Event{
		Metadata:            om(ns, name),
		Regarding:           &corev1.ObjectReference{Namespace: ns, Kind: "Pod", Name: "web"},
		EventTime:           timestamppb.New(time.Unix(1505828956, 0)),
		Note:                "This is " + name,
		Action:              "Do",
		Reason:              "Test",
		Type:                "Normal",
		ReportingController: "test-controller",
		ReportingInstance:   "test-node",
	}
}

func TestEventsViewCrossGroup(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	v1 := eventsv1.NewEventServiceClient(e.conn)

	// Written through events.k8s.io, read through core/v1.
	cr, err := v1.CreateEvent(ctx, &eventsv1.CreateEventRequest{Namespace: "default", Event: newV1Event("default", "new")})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cr.GetEvent().GetApiVersion(), "events.k8s.io/v1"; got != want {
		t.Errorf("apiVersion: got %q, want %q", got, want)
	}
	core, err := e.events.GetEvent(ctx, &corev1.GetEventRequest{Namespace: "default", Name: "new"})
	if err != nil {
		t.Fatal(err)
	}
	c := core.GetEvent()
	if got, want := c.GetApiVersion(), "v1"; got != want {
		t.Errorf("core apiVersion: got %q, want %q", got, want)
	}
	if c.GetMessage() != "This is new" || c.GetInvolvedObject().GetName() != "web" || c.GetReportingController() != "test-controller" ||
		c.GetReportingInstance() != "test-node" || c.GetAction() != "Do" || !c.GetEventTime().AsTime().Equal(time.Unix(1505828956, 0)) {
		t.Errorf("core view of the event: got %v", c)
	}
	if got, want := c.GetMetadata().GetResourceVersion(), cr.GetEvent().GetMetadata().GetResourceVersion(); got != want {
		t.Errorf("resourceVersion: got %q through core/v1, %q through events.k8s.io", got, want)
	}

	// Written through core/v1 (as kplane's and kubelet's recorders do),
	// read through events.k8s.io.
	now := timestamppb.New(time.Now().Truncate(time.Second))
	old := &corev1.Event{Metadata: om("default", "old"), InvolvedObject: &corev1.ObjectReference{Namespace: "default", Kind: "Pod", Name: "db"},
		Reason: "Pulled", Message: "pulled the image", Type: "Normal", Source: &corev1.EventSource{Component: "kubelet", Host: "n1"},
		FirstTimestamp: now, LastTimestamp: now, Count: 3}
	if _, err := e.events.CreateEvent(ctx, &corev1.CreateEventRequest{Namespace: "default", Event: old}); err != nil {
		t.Fatal(err)
	}
	got, err := v1.GetEvent(ctx, &eventsv1.GetEventRequest{Namespace: "default", Name: "old"})
	if err != nil {
		t.Fatal(err)
	}
	want := &eventsv1.Event{ApiVersion: "events.k8s.io/v1", Kind: "Event", Metadata: got.GetEvent().GetMetadata(),
		Regarding: old.InvolvedObject, Reason: "Pulled", Note: "pulled the image", Type: "Normal",
		DeprecatedSource: old.Source, DeprecatedFirstTimestamp: now, DeprecatedLastTimestamp: now, DeprecatedCount: 3}
	if !proto.Equal(got.GetEvent(), want) {
		t.Errorf("events.k8s.io view: got %v, want %v", got.GetEvent(), want)
	}

	// An update through events.k8s.io is seen through core/v1.
	upd := proto.Clone(cr.GetEvent()).(*eventsv1.Event)
	upd.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: timestamppb.New(time.Unix(1505828951, 0))}
	if _, err := v1.UpdateEvent(ctx, &eventsv1.UpdateEventRequest{Namespace: "default", Name: "new", Event: upd}); err != nil {
		t.Fatal(err)
	}
	core, err = e.events.GetEvent(ctx, &corev1.GetEventRequest{Namespace: "default", Name: "new"})
	if err != nil {
		t.Fatal(err)
	}
	if got := core.GetEvent().GetSeries().GetCount(); got != 2 {
		t.Errorf("series count through core/v1: got %d, want 2", got)
	}
	// As Kubernetes' Event strategy, no generation is kept.
	if got := core.GetEvent().GetMetadata().GetGeneration(); got != 0 {
		t.Errorf("generation after an update: got %d, want 0", got)
	}

	// Field selectors name each group's fields.
	for _, tc := range []struct {
		name, selector string
		want           []string
	}{
		{name: "reportingController", selector: "reportingController=test-controller", want: []string{"new"}},
		{name: "regarding.name", selector: "regarding.name=db", want: []string{"old"}},
		{name: "type", selector: "type=Normal", want: []string{"new", "old"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := v1.ListEvents(ctx, &eventsv1.ListEventsRequest{Namespace: "default", FieldSelector: tc.selector})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, it := range l.GetList().GetItems() {
				names = append(names, it.GetMetadata().GetName())
			}
			slices.Sort(names)
			if diff := cmp.Diff(tc.want, names); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
		})
	}
	_, err = v1.ListEvents(ctx, &eventsv1.ListEventsRequest{Namespace: "default", FieldSelector: "source=kubelet"})
	se := wantReason(t, err, apierrors.ReasonBadRequest)
	if want := "field label not supported: source"; se.Message != want {
		t.Errorf("message: got %q, want %q", se.Message, want)
	}
	l, err := e.events.ListEvents(ctx, &corev1.ListEventsRequest{Namespace: "default", FieldSelector: "source=kubelet"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(l.GetList().GetItems()); n != 1 {
		t.Errorf("core/v1 source=kubelet: got %d events, want 1", n)
	}
	// Through core/v1, source is the reporting controller of an event
	// without one.
	l, err = e.events.ListEvents(ctx, &corev1.ListEventsRequest{Namespace: "default", FieldSelector: "source=test-controller"})
	if err != nil {
		t.Fatal(err)
	}
	if items := l.GetList().GetItems(); len(items) != 1 || items[0].GetMetadata().GetName() != "new" {
		t.Errorf("core/v1 source=test-controller: got %v, want event new", items)
	}

	// A watch through events.k8s.io sees a write through core/v1,
	// converted.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ws, err := v1.WatchEvents(wctx, &eventsv1.WatchEventsRequest{Namespace: "default", ResourceVersion: l.GetList().GetMetadata().GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	third := proto.Clone(old).(*corev1.Event)
	third.Metadata = om("default", "third")
	if _, err := e.events.CreateEvent(ctx, &corev1.CreateEventRequest{Namespace: "default", Event: third}); err != nil {
		t.Fatal(err)
	}
	ev, err := ws.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ev.GetType() != "ADDED" || ev.GetObject().GetMetadata().GetName() != "third" || ev.GetObject().GetNote() != "pulled the image" ||
		ev.GetObject().GetApiVersion() != "events.k8s.io/v1" {
		t.Errorf("watch event: got %v", ev)
	}

	// Deleted through events.k8s.io: gone through core/v1.
	if _, err := v1.DeleteEvent(ctx, &eventsv1.DeleteEventRequest{Namespace: "default", Name: "old"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.events.GetEvent(ctx, &corev1.GetEventRequest{Namespace: "default", Name: "old"})
	wantReason(t, err, apierrors.ReasonNotFound)
	_, err = v1.GetEvent(ctx, &eventsv1.GetEventRequest{Namespace: "default", Name: "old"})
	se = wantReason(t, err, apierrors.ReasonNotFound)
	if want := `events.events.k8s.io "old" not found`; se.Message != want {
		t.Errorf("message: got %q, want %q", se.Message, want)
	}
}

func TestEventsViewValidation(t *testing.T) {
	e := newEnv(t, nil)
	ctx := admin(t)
	v1 := eventsv1.NewEventServiceClient(e.conn)
	mod := func(f func(*eventsv1.Event)) *eventsv1.Event {
		ev := newV1Event("default", "e")
		f(ev)
		return ev
	}
	for _, tc := range []struct {
		name string
		ev   *eventsv1.Event
		// ns is the event's namespace ("" for default).
		ns string
		// wantCauses are the field and message of each cause; none: the
		// event is accepted.
		wantCauses []string
		// coreCauses are those of the same event through core/v1.
		coreCauses []string
	}{
		{name: "valid", ev: newV1Event("default", "e")},
		{name: "no eventTime", ev: mod(func(ev *eventsv1.Event) { ev.EventTime = nil }),
			wantCauses: []string{"eventTime: Required value"}},
		{name: "bad type", ev: mod(func(ev *eventsv1.Event) { ev.Type = "Bad" }),
			wantCauses: []string{`type: Invalid value: "": has invalid value: Bad`}},
		{name: "no reporter, action or reason", ev: mod(func(ev *eventsv1.Event) { ev.ReportingController, ev.Action, ev.Reason = "", "", "" }),
			wantCauses: []string{
				"reportingController: Required value",
				`reportingController: Invalid value: "": name part must be non-empty`,
				`reportingController: Invalid value: "": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
				"action: Required value", "reason: Required value"},
			coreCauses: []string{
				"reportingComponent: Required value",
				`reportingComponent: Invalid value: "": name part must be non-empty`,
				`reportingComponent: Invalid value: "": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
				"action: Required value", "reason: Required value"}},
		{name: "deprecated fields set", ev: mod(func(ev *eventsv1.Event) {
			ev.DeprecatedCount = 2
			ev.DeprecatedSource = &corev1.EventSource{Component: "x"}
		}), wantCauses: []string{`count: Invalid value: "": needs to be unset`, `source: Invalid value: "": needs to be unset`}},
		{name: "series of one", ev: mod(func(ev *eventsv1.Event) { ev.Series = &eventsv1.EventSeries{Count: 1} }),
			wantCauses: []string{`series.count: Invalid value: "": should be at least 2`, "series.lastObservedTime: Required value"}},
		{name: "regarding in another namespace", ns: "kube-public", ev: mod(func(ev *eventsv1.Event) { ev.Regarding.Namespace = "" }),
			wantCauses: []string{`involvedObject.namespace: Invalid value: "": does not match event.namespace`},
			coreCauses: []string{`involvedObject.namespace: Invalid value: "": does not match event.namespace`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := proto.Clone(tc.ev).(*eventsv1.Event)
			ev.Metadata.Name = strings.ToLower(strings.NewReplacer(" ", "-", ",", "").Replace(tc.name))
			if tc.ns != "" {
				ev.Metadata.Namespace = tc.ns
			}
			ns := ev.GetMetadata().GetNamespace()
			_, err := v1.CreateEvent(ctx, &eventsv1.CreateEventRequest{Namespace: ns, Event: ev})
			checkCauses(t, err, "Event", ev.GetMetadata().GetName(), tc.wantCauses)
			ce := eventToCore(ev)
			ce.Metadata.Name += "-core"
			_, err = e.events.CreateEvent(ctx, &corev1.CreateEventRequest{Namespace: ns, Event: ce})
			checkCauses(t, err, "Event", ce.GetMetadata().GetName(), tc.coreCauses)
		})
	}

	// On update through events.k8s.io most fields are immutable; through
	// core/v1 they are not.
	cr, err := v1.CreateEvent(ctx, &eventsv1.CreateEventRequest{Namespace: "default", Event: newV1Event("default", "u")})
	if err != nil {
		t.Fatal(err)
	}
	upd := proto.Clone(cr.GetEvent()).(*eventsv1.Event)
	upd.Note, upd.Action, upd.ReportingInstance = "changed", "Redo", "other-node"
	_, err = v1.UpdateEvent(ctx, &eventsv1.UpdateEventRequest{Namespace: "default", Name: "u", Event: upd})
	checkCauses(t, err, "Event", "u", []string{
		`message: Invalid value: "changed": field is immutable`,
		`action: Invalid value: "Redo": field is immutable`,
		`reportingInstance: Invalid value: "other-node": field is immutable`})
	if _, err := e.events.UpdateEvent(ctx, &corev1.UpdateEventRequest{Namespace: "default", Name: "u", Event: eventToCore(upd)}); err != nil {
		t.Errorf("update through core/v1: %v", err)
	}
}

// checkCauses checks that err is nil when want is empty, else an Invalid
// error about kind/name with exactly want's causes ("field: message").
func checkCauses(t *testing.T, err error, kind, name string, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Errorf("got %v, want it accepted", err)
		}
		return
	}
	se := wantReason(t, err, apierrors.ReasonInvalid)
	if !strings.HasPrefix(se.Message, kind+` "`+name+`" is invalid: `) {
		t.Errorf("message: got %q, want it about %s %q", se.Message, kind, name)
	}
	var got []string
	for _, c := range se.Causes {
		got = append(got, c.Field+": "+c.Message)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("causes (-want +got):\n%s", diff)
	}
}
