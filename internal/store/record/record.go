// Package record is how a task is stored by every backend (Pebble values,
// the SQL record column): a version byte, then the whole task, including the
// two fields the API leaves out (the payload bytes and the wake time). One
// format, so a task reads back the same from any store.
//
// # Versions
//
// [Encode] writes version 2, a compact binary layout described in binary.go.
// [Decode] reads version 2 and version 1, the JSON records of earlier
// releases, so a store never has to be rewritten. A record of any other
// version is refused rather than guessed at.
//
// Earlier releases read version 1 only: once a release that writes version 2
// has run against a store, an earlier release cannot read the tasks it wrote.
// Fields added to version 2 since (Task.ScheduleID, Task.Trace) take a new bit of its
// mask: records without them read as before.
//
// # Schedules
//
// [EncodeSchedule] and [DecodeSchedule] are the record of a
// [task.Schedule]: a version byte and JSON (schedule.go).
package record

import (
	"errors"
	"fmt"
	"time"

	"github.com/toc-dev/toc/task"
)

// Version is the first byte of every task record [Encode] writes.
const Version = 2

// versionJSON is the first byte of the JSON records of earlier releases,
// which [Decode] still reads.
const versionJSON = 1

// Encode returns t's record. t's times should already be in UTC (see
// [Normalize]); they come back in UTC. It fails only for a time more than
// 30 million years from 1970.
func Encode(t *task.Task) ([]byte, error) {
	return AppendEncode(make([]byte, 0, maxSize(t)), t)
}

// AppendEncode appends t's record to dst and returns the extended slice, as
// [Encode] does. On error it returns dst unchanged.
func AppendEncode(dst []byte, t *task.Task) ([]byte, error) {
	if err := checkTimes(t); err != nil {
		return dst, fmt.Errorf("toc: encode task %s: %w", t.ID, err)
	}
	return appendBinary(dst, t), nil
}

// Decode reads a record of either version. The bytes are not kept: the task
// shares no memory with b. Malformed input returns an error.
func Decode(b []byte) (*task.Task, error) {
	if len(b) > 0 {
		switch b[0] {
		case Version:
			return decodeBinary(b)
		case versionJSON:
			return decodeJSON(b)
		}
	}
	return nil, fmt.Errorf("toc: task record of unknown version (first byte %x)", b[:min(len(b), 1)])
}

// Normalize puts t's times in UTC without a monotonic reading, as they come
// back from a record, and returns t.
func Normalize(t *task.Task) *task.Task {
	utc := func(p *time.Time) {
		if p != nil {
			*p = p.UTC().Round(0)
		}
	}
	utc(&t.DueAt)
	utc(&t.NextAttemptAt)
	utc(t.Deadline)
	utc(t.LeaseExpiresAt)
	utc(&t.CreatedAt)
	utc(&t.UpdatedAt)
	utc(t.FinishedAt)
	utc(&t.WakeAt)
	for i := range t.History {
		utc(&t.History[i].At)
	}
	return t
}

// ErrChangedIdentity is returned by a store's Update when fn changed the
// task's ID, App or Key.
var ErrChangedIdentity = errors.New("toc: update must not change a task's id, app or key")

// Apply is the middle of every store's Update: it calls fn with a copy of
// old, refuses a change of identity, and returns the result normalized and
// in memory of its own (fn may have kept the pointer it was given). An
// error from fn comes back unchanged.
func Apply(old *task.Task, fn func(*task.Task) error) (*task.Task, error) {
	c := old.Clone()
	if err := fn(c); err != nil {
		return nil, err
	}
	return applied(old, c)
}

// ApplyMany is the middle of every store's UpdateMany, Apply for a batch:
// it calls fn once with a copy of each of olds (nil for a nil one: a task
// not stored) and returns, for each old whose error from fn is nil, the
// copy as fn left it, checked and normalized as Apply does. fn changes the
// tasks in place: what it puts in the slice itself is not read. errs holds
// fn's errors, unchanged, or ErrChangedIdentity; news[i] is nil wherever
// errs[i] is not, and where olds[i] is nil (errs[i] is nil there too, but
// for a batch refused whole: the store says why).
//
// A task twice in olds, or a result of fn that is not one error per task,
// is a bug of the caller: then fn's changes are all refused, every entry
// with that error (fn is not called for the former). Two writes of one task
// in one batch would leave the first one's index entries behind.
func ApplyMany(olds []*task.Task, fn func([]*task.Task) []error) (news []*task.Task, errs []error) {
	return ApplyManyWith(olds, false, fn)
}

// ApplyManyWith is ApplyMany, or, when shared, ApplyMany for fn of a
// [store.UpdateOpts] with Shared: fn gets olds themselves, which it must
// not change, and puts in the slice a deep copy of its own of each task it
// changes (which news then holds, normalized, without another copy); an
// entry left as given with a nil error is written unchanged (a copy).
func ApplyManyWith(olds []*task.Task, shared bool, fn func([]*task.Task) []error) (news []*task.Task, errs []error) {
	// news and the copy of it given to fn share one array.
	both := make([]*task.Task, 2*len(olds))
	news, given := both[:len(olds):len(olds)], both[len(olds):]
	errs = make([]error, len(olds))
	fail := func(err error) ([]*task.Task, []error) {
		clear(news)
		for i := range errs {
			errs[i] = err
		}
		return news, errs
	}
	if id, twice := repeated(olds); twice {
		return fail(fmt.Errorf("toc: update many: task %s is in the batch twice", id))
	}
	for i, old := range olds {
		if old == nil {
			continue
		}
		if shared {
			news[i] = old
		} else {
			news[i] = old.Clone()
		}
	}
	copy(given, news) // shared: fn puts its copies here
	fnErrs := fn(given)
	if len(fnErrs) != len(olds) {
		return fail(fmt.Errorf("toc: update many: fn returned %d errors for %d tasks", len(fnErrs), len(olds)))
	}
	for i, old := range olds {
		switch {
		case old == nil:
		case fnErrs[i] != nil:
			news[i], errs[i] = nil, fnErrs[i]
		case !shared:
			news[i], errs[i] = applied(old, news[i])
		case given[i] == old || given[i] == nil:
			news[i], errs[i] = applied(old, old) // written unchanged
		default:
			news[i], errs[i] = appliedOwn(old, given[i])
		}
	}
	return news, errs
}

// appliedOwn is applied for c, a copy fn handed over: normalized in place.
func appliedOwn(old, c *task.Task) (*task.Task, error) {
	if c.ID != old.ID || c.App != old.App || c.Key != old.Key {
		return nil, ErrChangedIdentity
	}
	return Normalize(c), nil
}

// applied is what Apply and ApplyMany do after fn: it refuses a change of
// identity from old to c, fn's copy, and returns c normalized and in memory
// of its own.
func applied(old, c *task.Task) (*task.Task, error) {
	if c.ID != old.ID || c.App != old.App || c.Key != old.Key {
		return nil, ErrChangedIdentity
	}
	return Normalize(c.Clone()), nil
}

// repeatedLinear is the size of a batch up to which repeated compares
// every pair of tasks instead of making a map: fire jobs and outcome
// batches are mostly a few tasks each, and a map per batch was a fifth of
// a push fire's allocations by count.
const repeatedLinear = 16

// repeated returns the id of a task that is in ts twice (nils skipped),
// and whether there is one.
func repeated(ts []*task.Task) (task.ID, bool) {
	if len(ts) <= repeatedLinear {
		for i, t := range ts {
			if t == nil {
				continue
			}
			for _, u := range ts[:i] {
				if u != nil && u.ID == t.ID {
					return t.ID, true
				}
			}
		}
		return task.ID{}, false
	}
	seen := make(map[task.ID]bool, len(ts))
	for _, t := range ts {
		if t == nil {
			continue
		}
		if seen[t.ID] {
			return t.ID, true
		}
		seen[t.ID] = true
	}
	return task.ID{}, false
}
