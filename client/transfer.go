package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/toc-dev/toc/task"
)

// Backup asks the server for a consistent copy of its embedded store (an
// admin token's call): a tar stream of a store directory, which `toc serve
// --data DIR` opens once unpacked into DIR. Its last entry is
// "toc-backup.json", counting the files before it: a stream that ends
// without it was cut short. Read it to the end and close it. A cluster
// node answers 501: a cluster is backed up with its databases' own tools.
func (c *Client) Backup(ctx context.Context) (io.ReadCloser, error) {
	resp, err := c.open(ctx, http.MethodGet, "/v1/admin/backup", nil, nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// open sends one request with body (of contentType) and returns a 2xx
// answer with its body unread; any other answer becomes *Error.
func (c *Client) open(ctx context.Context, method, path string, query url.Values, body io.Reader, contentType string) (*http.Response, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("toc: %w", err)
	}
	req.Header.Set("User-Agent", "toc-go-client")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// ExportOptions selects the tasks of [Client.Export]. Zero fields select
// all.
type ExportOptions struct {
	App   string     // one app's tasks
	State task.State // the tasks in one state
}

// ExportStream is the answer of [Client.Export]: NDJSON, one task per line
// as [Client.Get] returns it (decode a line into a task.Task), then, when
// no State was asked for, one schedule per line as {"schedule": <as
// [Client.GetSchedule] returns it>}. Read it to io.EOF, then Count tells
// whether every line arrived; Close it.
type ExportStream struct {
	resp *http.Response
	eof  bool
}

// exportCountTrailer is the trailer that counts an export's tasks.
const exportCountTrailer = "Toc-Export-Count"

// Export streams every task the server has (an admin token's call), or
// those opts selects, app by app and state by state, in id order, then
// the schedules (of opts.App; none when opts.State is set). An
// export of a server that fires as it goes is a picture taken over time:
// a task that changes state meanwhile may appear twice or not at all.
// For a move, export a store no server runs on (toc export --data).
func (c *Client) Export(ctx context.Context, opts ExportOptions) (*ExportStream, error) {
	q := url.Values{}
	if opts.App != "" {
		q.Set("app", opts.App)
	}
	if opts.State != "" {
		q.Set("state", string(opts.State))
	}
	resp, err := c.open(ctx, http.MethodGet, "/v1/admin/export", q, nil, "")
	if err != nil {
		return nil, err
	}
	return &ExportStream{resp: resp}, nil
}

// Read reads the NDJSON.
func (s *ExportStream) Read(p []byte) (int, error) {
	n, err := s.resp.Body.Read(p)
	if errors.Is(err, io.EOF) {
		s.eof = true
	}
	return n, err
}

// Close closes the stream.
func (s *ExportStream) Close() error { return s.resp.Body.Close() }

// Count returns the number of lines (tasks and schedules) the server says
// it sent, once Read has returned io.EOF; ok is false before that, or when
// the answer carried no count (a proxy dropped the trailer).
func (s *ExportStream) Count() (n int, ok bool) {
	if !s.eof {
		return 0, false
	}
	v := s.resp.Trailer.Get(exportCountTrailer)
	if v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}

// ImportResult is what one [Client.Import] did.
type ImportResult struct {
	// Imported counts the tasks stored.
	Imported int `json:"imported"`
	// Existing counts the tasks the server already had under their id
	// (imported before): left alone.
	Existing int `json:"existing"`
	// Released counts the tasks that were being delivered when exported:
	// stored scheduled, due now, so that the attempt is made again.
	Released int `json:"released"`
	// Moved is always empty: every task keeps its id. (Servers before
	// issue 23 stored some tasks of a cluster under a new id, listed here.)
	Moved []MovedTask `json:"moved"`
	// Taken lists the tasks not imported because another task of the
	// server holds their app and key.
	Taken []TakenKey `json:"taken"`
	// SchedulesImported, SchedulesExisting and SchedulesTaken are the
	// same for the schedule lines of the request ({"schedule": {...}}).
	SchedulesImported int        `json:"schedules_imported"`
	SchedulesExisting int        `json:"schedules_existing"`
	SchedulesTaken    []TakenKey `json:"schedules_taken"`
}

// MovedTask is a task imported under a new id.
type MovedTask struct {
	ID    task.ID `json:"id"`
	NewID task.ID `json:"new_id"`
}

// TakenKey is a task not imported: Holder holds its app and key.
type TakenKey struct {
	ID     task.ID `json:"id"`
	App    string  `json:"app"`
	Key    string  `json:"key"`
	Holder task.ID `json:"holder"`
}

// ImportMax is the most lines (tasks and schedules) one [Client.Import]
// sends.
const ImportMax = 1000

// Import re-creates the tasks and schedules an export wrote (an admin
// token's call): ndjson holds up to ImportMax of them, one per line. They
// keep their ids, keys, times, states, attempts, payloads and history. Importing again is safe: a task the server has under its id is
// left alone. The server checks every line before storing any: a bad one
// refuses the request with an *Error whose Message starts "line N" and
// whose Field names the field.
func (c *Client) Import(ctx context.Context, ndjson io.Reader) (*ImportResult, error) {
	resp, err := c.open(ctx, http.MethodPost, "/v1/admin/import", nil, ndjson, "application/x-ndjson")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	res := new(ImportResult)
	if err := json.NewDecoder(resp.Body).Decode(res); err != nil {
		return nil, fmt.Errorf("toc: decode answer to POST /v1/admin/import: %w", err)
	}
	return res, nil
}
