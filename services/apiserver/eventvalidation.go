// This file holds the validation of an Event, which depends on the group
// version the request came through as Kubernetes' does: through core/v1
// only the legacy rules (and those of an Event with an eventTime), through
// events.k8s.io/v1 the strict ones too (eventTime, a Normal or Warning
// type, no deprecated fields on create; most fields immutable on update).

package apiserver

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// Kubernetes' limits on an Event's fields.
const (
	eventReportingInstanceMax = 128
	eventActionMax            = 128
	eventReasonMax            = 128
	eventNoteMax              = 1024
)

// validateEvent is Kubernetes' ValidateEventCreate (old nil) and
// ValidateEventUpdate for a request through r's group version.
func validateEvent(r *resourceInfo, e, old *corev1.Event) field.ErrorList {
	errs := legacyValidateEvent(r, e)
	if r.Group != eventsGroup {
		return errs
	}
	if old == nil {
		errs = append(errs, validateEventSeries(e)...)
		if isZeroTime(e.GetEventTime()) {
			errs = append(errs, field.Required(field.NewPath("eventTime"), ""))
		}
		if t := e.GetType(); t != "Normal" && t != "Warning" {
			errs = append(errs, field.Invalid(field.NewPath("type"), "", "has invalid value: "+t))
		}
		if !isZeroTime(e.GetFirstTimestamp()) {
			errs = append(errs, field.Invalid(field.NewPath("firstTimestamp"), "", "needs to be unset"))
		}
		if !isZeroTime(e.GetLastTimestamp()) {
			errs = append(errs, field.Invalid(field.NewPath("lastTimestamp"), "", "needs to be unset"))
		}
		if e.GetCount() != 0 {
			errs = append(errs, field.Invalid(field.NewPath("count"), "", "needs to be unset"))
		}
		if e.GetSource().GetComponent() != "" || e.GetSource().GetHost() != "" {
			errs = append(errs, field.Invalid(field.NewPath("source"), "", "needs to be unset"))
		}
		return errs
	}
	if !proto.Equal(e.GetSeries(), old.GetSeries()) {
		errs = append(errs, validateEventSeries(e)...)
	}
	immutable := func(changed bool, name string, v any) {
		if changed {
			errs = append(errs, field.Invalid(field.NewPath(name), v, "field is immutable"))
		}
	}
	immutable(!sameRef(e.GetInvolvedObject(), old.GetInvolvedObject()), "involvedObject", refValue(e.GetInvolvedObject(), false))
	immutable(e.GetReason() != old.GetReason(), "reason", e.GetReason())
	immutable(e.GetMessage() != old.GetMessage(), "message", e.GetMessage())
	immutable(e.GetSource().GetComponent() != old.GetSource().GetComponent() || e.GetSource().GetHost() != old.GetSource().GetHost(),
		"source", goValue(fmt.Sprintf("core.EventSource{Component:%q, Host:%q}", e.GetSource().GetComponent(), e.GetSource().GetHost())))
	immutable(!sameTime(e.GetFirstTimestamp(), old.GetFirstTimestamp(), time.Second), "firstTimestamp", timeValue(e.GetFirstTimestamp()))
	immutable(!sameTime(e.GetLastTimestamp(), old.GetLastTimestamp(), time.Second), "lastTimestamp", timeValue(e.GetLastTimestamp()))
	immutable(e.GetCount() != old.GetCount(), "count", e.GetCount())
	// Kubernetes checks reason twice.
	immutable(e.GetReason() != old.GetReason(), "reason", e.GetReason())
	immutable(e.GetType() != old.GetType(), "type", e.GetType())
	// Below a microsecond a change is tolerated (clients that truncate).
	immutable(!sameTime(e.GetEventTime(), old.GetEventTime(), time.Microsecond), "eventTime", timeValue(e.GetEventTime()))
	immutable(e.GetAction() != old.GetAction(), "action", e.GetAction())
	immutable(!sameRef(e.GetRelated(), old.GetRelated()), "related", refValue(e.GetRelated(), true))
	immutable(e.GetReportingController() != old.GetReportingController(), "reportingController", e.GetReportingController())
	immutable(e.GetReportingInstance() != old.GetReportingInstance(), "reportingInstance", e.GetReportingInstance())
	return errs
}

// legacyValidateEvent is what every Event passes, whatever the group
// version: the involved object's namespace agrees with the Event's, and an
// Event with an eventTime names its reporter, action and reason.
func legacyValidateEvent(r *resourceInfo, e *corev1.Event) field.ErrorList {
	var errs field.ErrorList
	ns := meta(e).GetNamespace()
	ioNS := e.GetInvolvedObject().GetNamespace()
	mismatch := func() {
		errs = append(errs, field.Invalid(field.NewPath("involvedObject", "namespace"), ioNS, "does not match event.namespace"))
	}
	if isZeroTime(e.GetEventTime()) {
		if (ioNS == "" && ns != "" && ns != "default") || (ioNS != "" && ns != ioNS) {
			mismatch()
		}
	} else {
		if ioNS == "" && ns != "default" && ns != "kube-system" {
			mismatch()
		}
		// The field's name in the request's group version.
		rc := field.NewPath("reportingController")
		if r.Group == "" {
			rc = field.NewPath("reportingComponent")
		}
		if e.GetReportingController() == "" {
			errs = append(errs, field.Required(rc, ""))
		}
		for _, msg := range validation.IsQualifiedName(e.GetReportingController()) {
			errs = append(errs, field.Invalid(rc, e.GetReportingController(), msg))
		}
		errs = append(errs, requiredMax(e.GetReportingInstance(), "reportingInstance", eventReportingInstanceMax)...)
		errs = append(errs, requiredMax(e.GetAction(), "action", eventActionMax)...)
		errs = append(errs, requiredMax(e.GetReason(), "reason", eventReasonMax)...)
		if len(e.GetMessage()) > eventNoteMax {
			errs = append(errs, field.Invalid(field.NewPath("message"), "", fmt.Sprintf("can have at most %d characters", eventNoteMax)))
		}
	}
	for _, msg := range validation.IsDNS1123Subdomain(ns) {
		errs = append(errs, field.Invalid(field.NewPath("namespace"), ns, msg))
	}
	return errs
}

// requiredMax refuses an empty v, or one longer than max characters.
func requiredMax(v, name string, max int) field.ErrorList {
	var errs field.ErrorList
	if v == "" {
		errs = append(errs, field.Required(field.NewPath(name), ""))
	}
	if len(v) > max {
		errs = append(errs, field.Invalid(field.NewPath(name), "", fmt.Sprintf("can have at most %d characters", max)))
	}
	return errs
}

// validateEventSeries checks a series: at least 2 occurrences, and when
// the last one was observed.
func validateEventSeries(e *corev1.Event) field.ErrorList {
	s := e.GetSeries()
	if s == nil {
		return nil
	}
	var errs field.ErrorList
	if s.GetCount() < 2 {
		errs = append(errs, field.Invalid(field.NewPath("series.count"), "", "should be at least 2"))
	}
	if isZeroTime(s.GetLastObservedTime()) {
		errs = append(errs, field.Required(field.NewPath("series.lastObservedTime"), ""))
	}
	return errs
}

// isZeroTime: unset, or Go's zero time (what a client sends for one).
func isZeroTime(t *timestamppb.Timestamp) bool {
	return t == nil || t.AsTime().IsZero()
}

// sameTime compares two times truncated to unit (a Time has seconds, a
// MicroTime microseconds).
func sameTime(a, b *timestamppb.Timestamp, unit time.Duration) bool {
	if isZeroTime(a) || isZeroTime(b) {
		return isZeroTime(a) == isZeroTime(b)
	}
	return a.AsTime().Truncate(unit).Equal(b.AsTime().Truncate(unit))
}

// sameRef compares object references, an unset one as an empty one.
func sameRef(a, b *corev1.ObjectReference) bool {
	if a == nil {
		a = &corev1.ObjectReference{}
	}
	if b == nil {
		b = &corev1.ObjectReference{}
	}
	return proto.Equal(a, b)
}

// refValue prints a reference as Kubernetes prints its internal type in an
// immutability error (ptr: the field is a pointer).
func refValue(o *corev1.ObjectReference, ptr bool) goValue {
	if ptr && o == nil {
		return "(*core.ObjectReference)(nil)"
	}
	v := fmt.Sprintf("core.ObjectReference{Kind:%q, Namespace:%q, Name:%q, UID:%q, APIVersion:%q, ResourceVersion:%q, FieldPath:%q}",
		o.GetKind(), o.GetNamespace(), o.GetName(), o.GetUid(), o.GetApiVersion(), o.GetResourceVersion(), o.GetFieldPath())
	if ptr {
		v = "&" + v
	}
	return goValue(v)
}

// timeValue prints a time as Kubernetes' metav1.Time prints itself.
func timeValue(t *timestamppb.Timestamp) goValue {
	if t == nil {
		return goValue(time.Time{}.String())
	}
	return goValue(t.AsTime().String())
}
