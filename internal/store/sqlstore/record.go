package sqlstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/toc-dev/toc/task"
)

// The record column holds the whole task in pebblestore's record format (a
// version byte, then the task's JSON fields plus payload and wake_at), so a
// task reads back the same from either store. The other columns are copies
// of the fields the indexes need.

// recordVersion is the first byte of every task record. A reader that finds
// another version refuses the record rather than guess.
const recordVersion = 1

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

// encodeRecord returns t's record. t's times should already be in UTC.
func encodeRecord(t *task.Task) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(recordVersion)
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(record{taskFields: taskFields(*t), Payload: t.Payload, WakeAt: t.WakeAt}); err != nil {
		return nil, fmt.Errorf("sqlstore: encode task %s: %w", t.ID, err)
	}
	b := buf.Bytes()
	return b[:len(b)-1], nil // Encode ends with a newline
}

// decodeRecord reads what encodeRecord wrote. The bytes are not kept.
func decodeRecord(b []byte) (*task.Task, error) {
	if len(b) == 0 || b[0] != recordVersion {
		return nil, fmt.Errorf("sqlstore: task record of unknown version (first byte %x)", b[:min(len(b), 1)])
	}
	var r record
	if err := json.Unmarshal(b[1:], &r); err != nil {
		return nil, fmt.Errorf("sqlstore: decode task record: %w", err)
	}
	t := task.Task(r.taskFields)
	t.Payload = r.Payload
	t.WakeAt = r.WakeAt
	return &t, nil
}

// normalize puts t's times in UTC without a monotonic reading, as they come
// back from a record, and returns t.
func normalize(t *task.Task) *task.Task {
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
	return t
}
