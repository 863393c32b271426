package engine

import (
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"time"

	"github.com/toc-dev/toc/internal/clock"

	"github.com/toc-dev/toc/task"
)

// This file holds the state machine. Every function here changes one task in
// memory and decides its WakeAt; the callers run them inside Store.Update so
// that the change and its indexes land in one write.

// wakeFor returns when the engine must next look at a scheduled task: its
// next attempt, or just after its deadline if that comes first.
func wakeFor(t *task.Task) time.Time {
	w := t.NextAttemptAt
	if t.Deadline != nil {
		if d := t.Deadline.Add(time.Millisecond); d.Before(w) {
			w = d
		}
	}
	return w
}

// pastDeadline reports whether delivering t at now would be too late.
func pastDeadline(t *task.Task, now time.Time) bool {
	return t.Deadline != nil && now.After(*t.Deadline)
}

func finish(t *task.Task, s task.State, now time.Time) {
	finishIn(t, s, now, new(time.Time))
}

// finishIn is finish with the finish time kept in *at (room allocated
// with t: outcomeCopy).
func finishIn(t *task.Task, s task.State, now time.Time, at *time.Time) {
	attempt := 0
	if s == task.Delivered || s == task.Dead {
		attempt = t.Attempts
	}
	msg := ""
	if s == task.Dead || s == task.Expired {
		msg = t.LastError
	}
	t.Record(now, string(s), attempt, msg)
	t.State = s
	t.Lease = ""
	t.LeaseExpiresAt = nil
	t.WakeAt = time.Time{}
	t.UpdatedAt = now
	*at = now
	t.FinishedAt = at
}

// expire ends a task whose deadline passed before it could be delivered.
func expire(t *task.Task, now time.Time) {
	if t.LastError == "" {
		t.LastError = "deadline passed before the task was delivered"
	}
	finish(t, task.Expired, now)
}

// requeue puts t back to scheduled for an attempt at next.
func requeue(t *task.Task, next, now time.Time) {
	t.State = task.Scheduled
	t.Lease = ""
	t.LeaseExpiresAt = nil
	t.NextAttemptAt = next
	t.WakeAt = wakeFor(t)
	t.UpdatedAt = now
	t.FinishedAt = nil
}

// startAttempt moves a scheduled task to delivering under a new lease that
// runs until now+lease. exp is where the lease's end is kept (t's
// LeaseExpiresAt points there): the room attemptCopy made for it, or nil
// for a time of its own.
func startAttempt(t *task.Task, now time.Time, lease time.Duration, boot string, exp *time.Time) {
	if exp == nil {
		exp = new(time.Time)
	}
	*exp = now.Add(lease)
	t.State = task.Delivering
	t.Attempts++
	t.Record(now, "attempt", t.Attempts, "")
	t.Lease = newLease(boot)
	t.LeaseExpiresAt = exp
	t.WakeAt = *exp
	t.UpdatedAt = now
}

// attemptCopy returns a copy of t that shares with it what neither
// changes (the payload, the target, the times pointed to), with a history
// of its own with room for one more event (the attempt's), and room for
// the lease's end (exp, for startAttempt). The copy, its history and exp
// are one allocation when t has one event (a first attempt); the fire
// path makes two copies per push (the attempt's task and its outcome's:
// outcomeCopy), and a claim one per pull task, so an allocation or two
// saved in each counts.
func attemptCopy(t *task.Task) (c *task.Task, exp *time.Time) {
	if len(t.History) <= 1 {
		b := new(struct {
			t      task.Task
			events [2]task.Event
			exp    time.Time
		})
		b.t = *t
		b.t.History = append(b.events[:0], t.History...)
		return &b.t, &b.exp
	}
	c = new(task.Task)
	*c = *t
	c.History = append(make([]task.Event, 0, len(t.History)+1), t.History...)
	return c, nil
}

// failAttempt records a failed attempt: the task is retried after retryIn
// (or its backoff when retryIn is nil), or is dead when it has no attempt
// left.
func failAttempt(t *task.Task, now time.Time, msg string, retryIn *time.Duration) {
	t.LastError = msg
	t.Record(now, "failed", t.Attempts, msg)
	p := t.Retry.WithDefaults()
	if t.Attempts >= p.MaxAttempts {
		finish(t, task.Dead, now)
		return
	}
	d := backoff(t.Attempts, p)
	if retryIn != nil {
		d = *retryIn
	}
	requeue(t, task.Ms(now.Add(d)), now)
}

// backoff returns the delay after the n-th failed attempt: min·2^(n-1)
// capped at max, with "equal jitter" (a random point in the upper half),
// and never outside [min, max].
func backoff(n int, p task.RetryPolicy) time.Duration {
	lo, hi := p.MinBackoff.Std(), p.MaxBackoff.Std()
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	d = d/2 + rand.N(d/2+1)
	return max(d, lo)
}

// newLease returns a lease token: the boot id of this process and 16 random
// hex digits. The boot part tells a restarted toc that a push lease belongs
// to a process that is gone.
func newLease(boot string) string {
	var b [8]byte
	_, _ = crand.Read(b[:])          // never fails (Go 1.24+)
	var buf [bootLen + 2*len(b)]byte // one allocation: the string
	return string(hex.AppendEncode(append(buf[:0], boot...), b[:]))
}

// leaseBoot returns the boot id part of a lease token.
func leaseBoot(lease string) string {
	if len(lease) < bootLen {
		return ""
	}
	return lease[:bootLen]
}

const bootLen = 8

func newBoot() string {
	var b [bootLen / 2]byte
	_, _ = crand.Read(b[:]) // never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// msNow is the current time truncated to the millisecond, the precision of
// every stored time. Truncating (not rounding) keeps "due <= now" from ever
// holding before the due instant.
// retry makes a dead or expired task fire again now, with its attempts
// reset and its deadline cleared.
func retry(t *task.Task, now time.Time) {
	t.Attempts = 0
	t.Deadline = nil
	t.Record(now, "retried", 0, "")
	requeue(t, now, now)
}

func msNow() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// msNow is the engine's clock's time at millisecond precision, in UTC:
// the time every transition records and decides by.
func (e *Engine) msNow() time.Time { return msNowOf(e.clock) }

// msNowOf is c's time at millisecond precision, in UTC.
func msNowOf(c clock.Clock) time.Time { return c.Now().UTC().Truncate(time.Millisecond) }
