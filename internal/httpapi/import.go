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
	"github.com/toc-dev/toc/task"
)

// importTask is one line of POST /v1/admin/import: a task as GET
// /v1/tasks/{id} answers it (and GET /v1/admin/export writes it), decoded
// as strictly as a create.
type importTask struct {
	ID             *string           `json:"id"`
	App            string            `json:"app"`
	Key            *string           `json:"key"`
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
}

type importEvent struct {
	At      *string `json:"at"`
	What    string  `json:"what"`
	Attempt int     `json:"attempt"`
	Error   string  `json:"error"`
}

// task turns the line into the task to import. The engine checks the rest
// (engine.Import).
func (it *importTask) task() (*task.Task, error) {
	t := &task.Task{App: it.App, Attempts: it.Attempts, LastError: it.LastError, Lease: it.Lease}
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

// importResponse answers an import.
type importResponse struct {
	Imported int               `json:"imported"`
	Existing int               `json:"existing"`
	Released int               `json:"released"`
	Moved    []engine.MovedID  `json:"moved"`
	Taken    []engine.TakenKey `json:"taken"`
}

// maxImportLine is the largest line of an import: a task at the payload
// cap in both of its forms, its history and the rest.
func (h *Handler) maxImportLine() int { return int(h.maxBody) + h.maxPayload + 256<<10 }

// importTasks is POST /v1/admin/import: up to engine.MaxBatch tasks as
// NDJSON, stored as they were (engine.Import). Admin only. Every line is
// checked before anything is stored: one bad line refuses the request (400
// naming the line and the field).
func (h *Handler) importTasks(w http.ResponseWriter, r *http.Request) {
	if err := requireAdmin(r); err != nil {
		h.writeError(w, r, err)
		return
	}
	ts, lines, err := h.readImport(w, r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if len(ts) == 0 {
		h.writeError(w, r, &apiError{status: http.StatusBadRequest, code: "invalid_json",
			msg: "request body has no task: send up to 1000 tasks as NDJSON, one per line, as GET /v1/admin/export writes them"})
		return
	}
	res, err := h.eng.Import(r.Context(), ts)
	var ie *engine.ImportError
	if errors.As(err, &ie) {
		err = atLine(lines[ie.Index], ie.ID.String(), ie.Err)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := importResponse{Imported: res.Imported, Existing: res.Existing, Released: res.Released,
		Moved: res.Moved, Taken: res.Taken}
	if out.Moved == nil {
		out.Moved = []engine.MovedID{}
	}
	if out.Taken == nil {
		out.Taken = []engine.TakenKey{}
	}
	h.log.InfoContext(r.Context(), "import", slog.Int("tasks", len(ts)), slog.Int("imported", res.Imported),
		slog.Int("existing", res.Existing), slog.Int("moved", len(res.Moved)), slog.Int("taken", len(res.Taken)))
	writeJSON(w, http.StatusOK, out)
}

// readImport reads the request's NDJSON: at most engine.MaxBatch tasks
// (blank lines skipped), each line at most maxImportLine bytes, the body
// at most maxBatch. It returns the tasks and the line number of each.
func (h *Handler) readImport(w http.ResponseWriter, r *http.Request) ([]*task.Task, []int, error) {
	if err := takeBody(r, h.maxBatch); err != nil {
		return nil, nil, err
	}
	br := bufio.NewReaderSize(http.MaxBytesReader(w, r.Body, h.maxBatch), 64<<10)
	maxLine := h.maxImportLine()
	var ts []*task.Task
	var lines []int
	for n := 1; ; n++ {
		line, err := readLine(br, maxLine)
		if errors.Is(err, errLineTooLong) {
			return nil, nil, &apiError{status: http.StatusRequestEntityTooLarge, code: "too_large",
				msg: fmt.Sprintf("line %d is longer than %d bytes", n, maxLine)}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, nil, err // *http.MaxBytesError → 413
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if len(ts) == engine.MaxBatch {
				return nil, nil, badField("tasks", "the body has more than %d tasks: send them in several requests", engine.MaxBatch)
			}
			var it importTask
			if derr := decodeBytes(line, &it); derr != nil {
				return nil, nil, atLine(n, idOf(&it), derr)
			}
			t, terr := it.task()
			if terr != nil {
				return nil, nil, atLine(n, idOf(&it), terr)
			}
			ts, lines = append(ts, t), append(lines, n)
		}
		if errors.Is(err, io.EOF) {
			return ts, lines, nil
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
		return *it.ID
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
		where += " (task " + id + ")"
	}
	return &apiError{status: status, code: code, field: field, msg: where + ": " + err.Error()}
}
