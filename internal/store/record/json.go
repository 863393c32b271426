package record

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/toc-dev/toc/task"
)

// Version 1 records, written by earlier releases, are the byte 1 followed by
// the JSON of a record value. Decode still reads them; nothing writes them
// any more (the tests keep the writer, to check that they still read back).

// taskFields has Task's fields and JSON tags but not its methods, so that
// encoding/json encodes it field by field (Task's own MarshalJSON writes the
// API form).
type taskFields task.Task

// jsonRecord is what a version 1 record holds: Task's JSON fields, plus the
// two that the API leaves out. The outer Payload and WakeAt hide Task's,
// which are tagged "-".
type jsonRecord struct {
	taskFields
	Payload []byte    `json:"payload,omitempty"` // base64 in JSON
	WakeAt  time.Time `json:"wake_at,omitzero"`
	// Trace came after version 1; it is here so that the tests' version 1
	// writer keeps every field.
	Trace *task.TraceContext `json:"trace,omitempty"`
}

// decodeJSON reads a version 1 record, exactly as earlier releases did.
func decodeJSON(b []byte) (*task.Task, error) {
	var r jsonRecord
	if err := json.Unmarshal(b[1:], &r); err != nil {
		return nil, fmt.Errorf("toc: decode task record: %w", err)
	}
	t := task.Task(r.taskFields)
	t.Payload = r.Payload
	t.WakeAt = r.WakeAt
	if r.Trace != nil && (r.Trace.Parent != "" || r.Trace.State != "") {
		t.Trace = r.Trace // an empty one is none, as version 2 stores it
	}
	return &t, nil
}
