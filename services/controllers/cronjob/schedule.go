// This file holds the CronJob controller's reading of a schedule: the
// latest scheduled time that is due, how many were missed, and when the
// next one comes, computed as Kubernetes does.
package cronjob

import (
	"errors"
	"time"

	"github.com/robfig/cron/v3"

	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
)

// maxScheduleSteps bounds the walk from the estimated latest time to the
// real one.
const maxScheduleSteps = 10000

var errScheduleTooDense = errors.New("time difference between two schedules is less than 1 second")

// mostRecentScheduleTime returns the earliest time considered (the last
// scheduled time, else the creation; with withDeadline, no earlier than
// startingDeadlineSeconds before now), the latest scheduled time after it
// and not after now (nil if none), and about how many were missed since.
// The count is Kubernetes' approximation (from the distance between the
// first two times), so that a CronJob whose clock is off by years costs a
// division, not a walk through every missed time.
func mostRecentScheduleTime(cj *batchv1.CronJob, now time.Time, sched cron.Schedule, withDeadline bool) (time.Time, *time.Time, int64, error) {
	earliest := cj.GetMetadata().GetCreationTimestamp().AsTime()
	if t := cj.GetStatus().GetLastScheduleTime(); t != nil {
		earliest = t.AsTime()
	}
	if d := cj.GetSpec().StartingDeadlineSeconds; withDeadline && d != nil {
		if limit := now.Add(-time.Duration(*d) * time.Second); limit.After(earliest) {
			earliest = limit
		}
	}
	t1 := sched.Next(earliest)
	t2 := sched.Next(t1)
	if now.Before(t1) {
		return earliest, nil, 0, nil
	}
	if now.Before(t2) {
		return earliest, &t1, 1, nil
	}
	between := int64(t2.Sub(t1).Round(time.Second).Seconds())
	if between < 1 {
		return earliest, nil, 0, errScheduleTooDense
	}
	missed := int64(now.Sub(t1).Seconds())/between + 1
	// Start one interval before the estimate and let the schedule find the
	// real times (irregular schedules such as "30 6-16/4 * * 1-5").
	var recent time.Time
	from := t1.Add(time.Duration((missed-2)*between) * time.Second)
	// Bounded: the estimate leaves a few steps at most for regular
	// schedules; an irregular one may need more, not thousands.
	for t, n := sched.Next(from), 0; !t.After(now) && n < maxScheduleSteps; t, n = sched.Next(t), n+1 {
		recent = t
	}
	if recent.IsZero() {
		return earliest, nil, missed, nil
	}
	return earliest, &recent, missed, nil
}

// nextScheduleTimeDuration is how long from now until the controller
// should look at the CronJob again: just after its next scheduled time.
func nextScheduleTimeDuration(cj *batchv1.CronJob, now time.Time, sched cron.Schedule) *time.Duration {
	earliest, recent, missed, err := mostRecentScheduleTime(cj, now, sched, false)
	switch {
	case err != nil:
		recent = &now
	case recent == nil && missed == 0:
		recent = &earliest
	case recent == nil:
		recent = &now
	}
	d := sched.Next(*recent).Add(nextScheduleDelta).Sub(now)
	return &d
}
