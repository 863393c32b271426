package httpapi

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/telemetry"
	"github.com/toc-dev/toc/task"
)

// importTask is one line of POST /v1/admin/import: a task as GET
// /v1/tasks/{id} answers it (and GET /v1/admin/export writes it), decoded
// as strictly as a create.
type importTask struct {
	ID             *string           `json:"id"`
	App            string            `json:"app"`
	Key            *string           `json:"key"`
	ScheduleID     *string           `json:"schedule_id"` // an occurrence's
	DueAt          *string           `json:"due_at"`
	NextAttemptAt  *string           `json:"next_attempt_at"`
	Deadline       *string           `json:"deadline"`
	Payload        jsontext.Value    `json:"payload"`
	PayloadBase64  *string           `json:"payload_base64"`
	Target         *task.Target      `json:"target"`
	Retry          *task.RetryPolicy `json:"retry"`
	State          *string           `json:"state"`
	Attempts       int               `json:"attempts"`
	LastError      string            `json:"last_error"`
	Lease          string            `json:"lease"`
	LeaseExpiresAt *string           `json:"lease_expires_at"`
	CreatedAt      *string           `json:"created_at"`
	UpdatedAt      *string           `json:"updated_at"`
	FinishedAt     *string           `json:"finished_at"`
	History        []importEvent     `json:"history"`
	TraceParent    string            `json:"traceparent"`
	TraceState     string            `json:"tracestate"`
}

type importEvent struct {
	At      *string `json:"at"`
	What    string  `json:"what"`
	Attempt int     `json:"attempt"`
	Error   string  `json:"error"`
}

// task turns the line into the task to import. The engine checks the rest
// (engine.Transfer.Import).
func (it *importTask) task() (*task.Task, error) {
	t := &task.Task{App: it.App, Attempts: it.Attempts, LastError: it.LastError, Lease: it.Lease}
	if err := checkTrace("", it.TraceParent, it.TraceState); err != nil {
		return nil, err
	}
	if it.TraceParent != "" {
		t.Trace = &task.TraceContext{Parent: it.TraceParent, State: it.TraceState}
	}
	if it.ID == nil {
		return nil, badField("id", "is required: the task's id, kept by the import")
	}
	id, err := task.ParseID(*it.ID)
	if err != nil || id.IsZero() {
		return nil, badField("id", "is not a task id: %q", *it.ID)
	}
	t.ID = id
	if it.Key != nil {
		if err := task.ValidateKey(*it.Key); err != nil {
			return nil, err
		}
		t.Key = *it.Key
	}
	if it.ScheduleID != nil {
		sid, err := task.ParseID(*it.ScheduleID)
		if err != nil || sid.IsZero() {
			return nil, badField("schedule_id", "is not a schedule id: %q", *it.ScheduleID)
		}
		t.ScheduleID = sid
	}
	if it.State == nil {
		return nil, badField("state", "is required: one of %v", task.States)
	}
	t.State = task.State(*it.State)
	required := []struct {
		field string
		s     *string
		dst   *time.Time
	}{
		{"due_at", it.DueAt, &t.DueAt},
		{"next_attempt_at", it.NextAttemptAt, &t.NextAttemptAt},
		{"created_at", it.CreatedAt, &t.CreatedAt},
		{"updated_at", it.UpdatedAt, &t.UpdatedAt},
	}
	for _, r := range required {
		if r.s == nil {
			return nil, badField(r.field, "is required")
		}
		if *r.dst, err = parseTime(r.field, *r.s); err != nil {
			return nil, err
		}
	}
	optional := []struct {
		field string
		s     *string
		dst   **time.Time
	}{
		{"deadline", it.Deadline, &t.Deadline},
		{"finished_at", it.FinishedAt, &t.FinishedAt},
		{"lease_expires_at", it.LeaseExpiresAt, &t.LeaseExpiresAt},
	}
	for _, o := range optional {
		if o.s == nil {
			continue
		}
		v, err := parseTime(o.field, *o.s)
		if err != nil {
			return nil, err
		}
		*o.dst = &v
	}
	// An export carries payload_base64 always and payload as well when the
	// bytes are JSON; the base64 form is exact (encoding JSON may escape
	// it), so it wins.
	switch {
	case it.PayloadBase64 != nil:
		if t.Payload, _, err = payloadOf(nil, it.PayloadBase64); err != nil {
			return nil, err
		}
	case it.Payload != nil:
		t.Payload = append([]byte(nil), it.Payload...)
	}
	if len(t.Payload) == 0 {
		t.Payload = nil
	}
	if it.Target != nil {
		t.Target = *it.Target
	}
	if it.Retry != nil {
		t.Retry = *it.Retry
	}
	for i, ev := range it.History {
		if ev.At == nil {
			return nil, badField(fmt.Sprintf("history.%d.at", i), "is required")
		}
		at, err := parseTime(fmt.Sprintf("history.%d.at", i), *ev.At)
		if err != nil {
			return nil, err
		}
		t.History = append(t.History, task.Event{At: at, What: ev.What, Attempt: ev.Attempt, Error: ev.Error})
	}
	return t, nil
}

// importSchedule is a schedule's line of POST /v1/admin/import:
// {"schedule": <a schedule as GET /v1/schedules/{id} answers it>}, as GET
// /v1/admin/export writes it, decoded as strictly as a create.
type importSchedule struct {
	Schedule *struct {
		scheduleRequest `json:",inline"`
		ID              *string `json:"id"`
		State           *string `json:"state"`
		NextAt          *string `json:"next_at"`
		LastAt          *string `json:"last_at"`
		CreatedAt       *string `json:"created_at"`
		UpdatedAt       *string `json:"updated_at"`
		TraceParent     string  `json:"traceparent"`
		TraceState      string  `json:"tracestate"`
	} `json:"schedule"`
}

// schedule turns the line into the schedule to import; the engine checks
// the rest (engine.Transfer.ImportSchedules).
func (is *importSchedule) schedule() (*task.Schedule, error) {
	in := is.Schedule
	if in == nil {
		return nil, badField("schedule", "is required")
	}
	if in.ID == nil {
		return nil, badField("schedule.id", "is required: the schedule's id, kept by the import")
	}
	id, err := task.ParseID(*in.ID)
	if err != nil || id.IsZero() {
		return nil, badField("schedule.id", "is not a schedule id: %q", *in.ID)
	}
	req := in.scheduleRequest
	if req.PayloadBase64 != nil {
		req.Payload = nil // an export carries both forms; the base64 one is exact
	}
	s, err := req.schedule()
	if err != nil {
		return nil, err
	}
	s.ID = id
	if err := checkTrace("schedule.", in.TraceParent, in.TraceState); err != nil {
		return nil, err
	}
	s.TraceParent, s.TraceState = in.TraceParent, in.TraceState
	if in.State == nil {
		return nil, badField("schedule.state", "is required: one of %v", task.ScheduleStates)
	}
	s.State = task.ScheduleState(*in.State)
	for _, f := range []struct {
		name string
		in   *string
		out  *time.Time
	}{{"schedule.created_at", in.CreatedAt, &s.CreatedAt}, {"schedule.updated_at", in.UpdatedAt, &s.UpdatedAt}} {
		if f.in == nil {
			return nil, badField(f.name, "is required")
		}
		if *f.out, err = parseTime(f.name, *f.in); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		name string
		in   *string
		out  **time.Time
	}{{"schedule.next_at", in.NextAt, &s.NextAt}, {"schedule.last_at", in.LastAt, &s.LastAt}} {
		if f.in == nil {
			continue
		}
		t, err := parseTime(f.name, *f.in)
		if err != nil {
			return nil, err
		}
		*f.out = &t
	}
	return s, nil
}

// checkTrace checks the trace context of an imported task or schedule
// (its fields named after prefix): a tracestate needs a traceparent, and a
// traceparent must be a valid one, as toc keeps them.
func checkTrace(prefix, traceparent, tracestate string) error {
	if traceparent == "" {
		if tracestate != "" {
			return badField(prefix+"tracestate", "needs a traceparent")
		}
		return nil
	}
	if !telemetry.Valid(traceparent) {
		return badField(prefix+"traceparent", "is not a W3C traceparent like 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01: %q", traceparent)
	}
	return nil
}

// isScheduleLine reports whether an import line is a schedule's: an
// object whose first member is "schedule".
func isScheduleLine(line []byte) bool {
	dec := jsontext.NewDecoder(bytes.NewReader(line))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return false
	}
	tok, err := dec.ReadToken()
	return err == nil && tok.Kind() == '"' && tok.String() == "schedule"
}

// importResponse answers an import.
type importResponse struct {
	Imported int               `json:"imported"`
	Existing int               `json:"existing"`
	Released int               `json:"released"`
	Moved    []engine.MovedID  `json:"moved"` // always empty: ids are kept
	Taken    []engine.TakenKey `json:"taken"`
	// The schedules of the request.
	SchedulesImported int               `json:"schedules_imported"`
	SchedulesExisting int               `json:"schedules_existing"`
	SchedulesTaken    []engine.TakenKey `json:"schedules_taken"`
}

// maxImportLine is the largest line of an import: a task at the payload
// cap in both of its forms, its history and the rest.
func (h *Handler) maxImportLine() int { return int(h.maxBody) + h.maxPayload + 256<<10 }

// importTasks is POST /v1/admin/import: up to engine.MaxBatch tasks and
// schedules as NDJSON, stored as they were (engine.Transfer.Import, then
// Transfer.ImportSchedules). Admin only. Every line is checked before
// anything is stored: one bad line refuses the request (400 naming the
// line and the field).
func (h *Handler) importTasks(w http.ResponseWriter, r *http.Request) {
	if err := requireAdmin(r); err != nil {
		h.writeError(w, r, err)
		return
	}
	in, err := h.readImport(w, r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if len(in.tasks) == 0 && len(in.schedules) == 0 {
		h.writeError(w, r, &apiError{status: http.StatusBadRequest, code: "invalid_json",
			msg: "request body has no task: send up to 1000 tasks and schedules as NDJSON, one per line, as GET /v1/admin/export writes them"})
		return
	}
	var res engine.ImportResult
	if len(in.tasks) > 0 {
		res, err = h.eng.Transfer().Import(r.Context(), in.tasks)
	}
	var sres engine.ScheduleImportResult
	if err == nil && len(in.schedules) > 0 {
		sres, err = h.eng.Transfer().ImportSchedules(r.Context(), in.schedules)
	}
	var ie *engine.ImportError
	if errors.As(err, &ie) {
		if ie.Schedule {
			err = atLine(in.scheduleLines[ie.Index], "schedule "+ie.ID.String(), ie.Err)
		} else {
			err = atLine(in.taskLines[ie.Index], "task "+ie.ID.String(), ie.Err)
		}
	}
	if err != nil {
		h.writeError(w, r, scheduleErr(err))
		return
	}
	out := importResponse{Imported: res.Imported, Existing: res.Existing, Released: res.Released,
		Moved: []engine.MovedID{}, Taken: res.Taken,
		SchedulesImported: sres.Imported, SchedulesExisting: sres.Existing, SchedulesTaken: sres.Taken}
	if out.Taken == nil {
		out.Taken = []engine.TakenKey{}
	}
	if out.SchedulesTaken == nil {
		out.SchedulesTaken = []engine.TakenKey{}
	}
	h.log.InfoContext(r.Context(), "import", slog.Int("tasks", len(in.tasks)), slog.Int("imported", res.Imported),
		slog.Int("existing", res.Existing), slog.Int("taken", len(res.Taken)),
		slog.Int("schedules", len(in.schedules)), slog.Int("schedules_imported", sres.Imported))
	writeJSON(w, http.StatusOK, out)
}

// importBody is what readImport read: the tasks and the schedules, and
// the line of each.
type importBody struct {
	tasks         []*task.Task
	taskLines     []int
	schedules     []*task.Schedule
	scheduleLines []int
}

// readImport reads the request's NDJSON: at most engine.MaxBatch lines of
// tasks and schedules (blank lines skipped), each line at most
// maxImportLine bytes, the body at most maxBatch.
func (h *Handler) readImport(w http.ResponseWriter, r *http.Request) (*importBody, error) {
	if err := takeBody(r, h.maxBatch); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(http.MaxBytesReader(w, r.Body, h.maxBatch), 64<<10)
	maxLine := h.maxImportLine()
	in := &importBody{}
	for n := 1; ; n++ {
		line, err := readLine(br, maxLine)
		if errors.Is(err, errLineTooLong) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, code: "too_large",
				msg: fmt.Sprintf("line %d is longer than %d bytes", n, maxLine)}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err // *http.MaxBytesError → 413
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if len(in.tasks)+len(in.schedules) == engine.MaxBatch {
				return nil, badField("tasks", "the body has more than %d lines: send them in several requests", engine.MaxBatch)
			}
			if isScheduleLine(line) {
				var is importSchedule
				if derr := decodeBytes(line, &is); derr != nil {
					return nil, atLine(n, scheduleIDOf(&is), derr)
				}
				s, serr := is.schedule()
				if serr != nil {
					return nil, atLine(n, scheduleIDOf(&is), serr)
				}
				in.schedules, in.scheduleLines = append(in.schedules, s), append(in.scheduleLines, n)
			} else {
				var it importTask
				if derr := decodeBytes(line, &it); derr != nil {
					return nil, atLine(n, idOf(&it), derr)
				}
				t, terr := it.task()
				if terr != nil {
					return nil, atLine(n, idOf(&it), terr)
				}
				in.tasks, in.taskLines = append(in.tasks, t), append(in.taskLines, n)
			}
		}
		if errors.Is(err, io.EOF) {
			return in, nil
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine reads one line (without its newline) of at most max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max+1 { // +1: the newline
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), err
	}
}

func idOf(it *importTask) string {
	if it.ID != nil {
		return "task " + *it.ID
	}
	return ""
}

func scheduleIDOf(is *importSchedule) string {
	if is.Schedule != nil && is.Schedule.ID != nil {
		return "schedule " + *is.Schedule.ID
	}
	return ""
}

// atLine says where in the request err happened, keeping its status, code
// and field.
func atLine(n int, id string, err error) error {
	status, code, field := statusOf(err)
	if status == http.StatusInternalServerError {
		return err
	}
	where := fmt.Sprintf("line %d", n)
	if id != "" {
		where += " (" + id + ")" // "task ID" or "schedule ID"
	}
	return &apiError{status: status, code: code, field: field, msg: where + ": " + err.Error()}
}
