// Package record is how a task is stored by every backend (Pebble values,
// the SQL record column): a version byte, then the task's JSON fields plus
// the two the API leaves out (the payload bytes and the wake time). One
// format, so a task reads back the same from any store.
package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toc-dev/toc/task"
)

// Version is the first byte of every task record. A reader that finds
// another version refuses the record rather than guess.
const Version = 1

// taskFields has Task's fields and JSON tags but not its methods, so that
// encoding/json encodes it field by field (Task's own MarshalJSON writes the
// API form).
type taskFields task.Task

// record is what a task is stored as: Task's JSON fields, plus the two that
// the API leaves out. The outer Payload and WakeAt hide Task's, which are
// tagged "-".
type record struct {
	taskFields
	Payload []byte    `json:"payload,omitempty"` // base64 in JSON
	WakeAt  time.Time `json:"wake_at,omitzero"`
}

// Encode returns t's record. t's times should already be in UTC.
func Encode(t *task.Task) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(Version)
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(record{taskFields: taskFields(*t), Payload: t.Payload, WakeAt: t.WakeAt}); err != nil {
		return nil, fmt.Errorf("toc: encode task %s: %w", t.ID, err)
	}
	b := buf.Bytes()
	return b[:len(b)-1], nil // Encode ends with a newline
}

// Decode reads what Encode wrote. The bytes are not kept.
func Decode(b []byte) (*task.Task, error) {
	if len(b) == 0 || b[0] != Version {
		return nil, fmt.Errorf("toc: task record of unknown version (first byte %x)", b[:min(len(b), 1)])
	}
	var r record
	if err := json.Unmarshal(b[1:], &r); err != nil {
		return nil, fmt.Errorf("toc: decode task record: %w", err)
	}
	t := task.Task(r.taskFields)
	t.Payload = r.Payload
	t.WakeAt = r.WakeAt
	return &t, nil
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
	if c.ID != old.ID || c.App != old.App || c.Key != old.Key {
		return nil, ErrChangedIdentity
	}
	return Normalize(c.Clone()), nil
}
