package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/toc-dev/toc/task"
)

// CreateScheduleRequest is the body of [Client.CreateSchedule]: a rule
// (exactly one of Cron and Every) and the template of the tasks it makes.
// Zero fields are left out of the request, so the server's defaults apply
// (Timezone "UTC", CatchUp "one", the app's target and retry policy).
//
// (ScheduleRequest, the older name, creates a one-off task.)
type CreateScheduleRequest struct {
	// App names the application the schedule and its occurrences belong
	// to; required.
	App string `json:"app"`
	// Key names the schedule within App (at most [task.MaxScheduleKey]
	// bytes); required. While App has a schedule with this key, creating
	// another returns that schedule, unchanged, with created false.
	Key string `json:"key"`

	// Cron is a cron expression: 5 fields (minute, hour, day of month,
	// month, day of week) or 6 with a leading seconds field, or @hourly,
	// @daily, @weekly, @monthly, @yearly. Evaluated in Timezone.
	Cron string `json:"cron,omitempty"`
	// Every is a fixed interval, at least [task.MinEvery], counted from
	// StartAt when given, else from the create.
	Every task.Duration `json:"every,omitempty"`
	// Timezone is an IANA zone name like "Europe/Berlin"; "" is "UTC".
	Timezone string `json:"timezone,omitempty"`
	// StartAt and EndAt, when set, bound the occurrences: none before
	// StartAt, none after EndAt.
	StartAt *time.Time `json:"start_at,omitempty"`
	EndAt   *time.Time `json:"end_at,omitempty"`
	// CatchUp says what happens to the occurrences missed while toc was
	// down: [task.CatchUpSkip], [task.CatchUpOne] (the server's default) or
	// [task.CatchUpAll].
	CatchUp task.CatchUp `json:"catch_up,omitempty"`

	// Payload is a JSON value each occurrence delivers as these bytes;
	// send anything else as PayloadBase64. Give at most one.
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 []byte          `json:"payload_base64,omitempty"`
	// Target says how each occurrence is delivered. Left zero, the app's
	// default target is used (an error when the app has none).
	Target task.Target `json:"target"`
	// Retry overrides the server's retry policy; zero fields keep defaults.
	Retry *task.RetryPolicy `json:"retry,omitempty"`
	// DeadlineAfter, when set, gives each occurrence the deadline of its
	// due time plus this.
	DeadlineAfter task.Duration `json:"deadline_after,omitempty"`
}

// PatchScheduleRequest changes a schedule. Fields left zero are not
// changed. Give at most one of Cron and Every (either replaces the rule),
// of Payload and PayloadBase64, and of each value and its Clear flag.
type PatchScheduleRequest struct {
	Cron     string        `json:"cron,omitempty"`
	Every    task.Duration `json:"every,omitempty"`
	Timezone string        `json:"timezone,omitempty"`

	StartAt      *time.Time   `json:"start_at,omitempty"`
	ClearStartAt bool         `json:"-"` // sent as "start_at": null
	EndAt        *time.Time   `json:"end_at,omitempty"`
	ClearEndAt   bool         `json:"-"` // sent as "end_at": null
	CatchUp      task.CatchUp `json:"catch_up,omitempty"`

	Payload       json.RawMessage   `json:"payload,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
	Target        *task.Target      `json:"target,omitempty"`
	Retry         *task.RetryPolicy `json:"retry,omitempty"`

	DeadlineAfter      task.Duration `json:"deadline_after,omitempty"`
	ClearDeadlineAfter bool          `json:"-"` // sent as "deadline_after": null
}

// MarshalJSON writes the patch body: the fields set, and null for each
// Clear flag.
func (r PatchScheduleRequest) MarshalJSON() ([]byte, error) {
	switch {
	case r.Cron != "" && r.Every != 0:
		return nil, errors.New("give Cron or Every, not both")
	case r.ClearStartAt && r.StartAt != nil:
		return nil, errors.New("give StartAt or ClearStartAt, not both")
	case r.ClearEndAt && r.EndAt != nil:
		return nil, errors.New("give EndAt or ClearEndAt, not both")
	case r.ClearDeadlineAfter && r.DeadlineAfter != 0:
		return nil, errors.New("give DeadlineAfter or ClearDeadlineAfter, not both")
	}
	type plain PatchScheduleRequest // its fields, not this method
	null := json.RawMessage("null")
	w := struct {
		plain
		StartAt       any `json:"start_at,omitempty"` // these hide plain's
		EndAt         any `json:"end_at,omitempty"`
		DeadlineAfter any `json:"deadline_after,omitempty"`
	}{plain: plain(r)}
	switch {
	case r.ClearStartAt:
		w.StartAt = null
	case r.StartAt != nil:
		w.StartAt = r.StartAt
	}
	switch {
	case r.ClearEndAt:
		w.EndAt = null
	case r.EndAt != nil:
		w.EndAt = r.EndAt
	}
	switch {
	case r.ClearDeadlineAfter:
		w.DeadlineAfter = null
	case r.DeadlineAfter != 0:
		w.DeadlineAfter = r.DeadlineAfter
	}
	return json.Marshal(w)
}

// ListSchedulesOptions pages through [Client.ListSchedules]. A nil
// *ListSchedulesOptions asks for the first page at the server's default
// size (100).
type ListSchedulesOptions struct {
	// Limit is the most schedules per page; 0 takes the server's default.
	Limit int
	// Cursor is a previous page's NextCursor; "" starts at the beginning.
	Cursor string
}

// SchedulesPage is one page of [Client.ListSchedules].
type SchedulesPage struct {
	Schedules []*task.Schedule `json:"schedules"`
	// NextCursor fetches the next page; "" on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// CreateSchedule creates a recurring schedule. created is false when the
// app already had a schedule with this key; s is then that schedule,
// unchanged. A rule the server cannot read answers a 400 [*Error] naming
// the field ("cron", "every", "timezone", "end_at", "catch_up").
func (c *Client) CreateSchedule(ctx context.Context, req CreateScheduleRequest) (s *task.Schedule, created bool, err error) {
	s = new(task.Schedule)
	status, err := c.do(ctx, http.MethodPost, "/v1/schedules", nil, req, s)
	if err != nil {
		return nil, false, err
	}
	return s, status == http.StatusCreated, nil
}

// GetSchedule returns the schedule with this id; [IsNotFound] when there
// is none (or the token does not reach its app).
func (c *Client) GetSchedule(ctx context.Context, id task.ID) (*task.Schedule, error) {
	return c.schedule(ctx, http.MethodGet, schedulePath(id, ""), nil)
}

// GetScheduleByKey returns app's schedule with this key; [IsNotFound] when
// there is none. Any key is escaped for the URL.
func (c *Client) GetScheduleByKey(ctx context.Context, app, key string) (*task.Schedule, error) {
	p, err := scheduleKeyPath(app, key)
	if err != nil {
		return nil, err
	}
	return c.schedule(ctx, http.MethodGet, p, nil)
}

// ListSchedules returns one page of app's schedules, in id order (oldest
// first). Pass the page's NextCursor in opts.Cursor for the next page,
// until it is "".
func (c *Client) ListSchedules(ctx context.Context, app string, opts *ListSchedulesOptions) (*SchedulesPage, error) {
	if app == "" {
		return nil, errors.New("toc: list schedules: app is required")
	}
	q := url.Values{}
	if opts != nil {
		if opts.Limit > 0 {
			q.Set("limit", strconv.Itoa(opts.Limit))
		}
		if opts.Cursor != "" {
			q.Set("cursor", opts.Cursor)
		}
	}
	page := new(SchedulesPage)
	if _, err := c.do(ctx, http.MethodGet, "/v1/apps/"+pathSegment(app)+"/schedules", q, nil, page); err != nil {
		return nil, err
	}
	return page, nil
}

// PatchSchedule changes a schedule and returns it as changed. Its next
// occurrence is computed again; one made for the old rule and not yet
// started is cancelled and replaced.
func (c *Client) PatchSchedule(ctx context.Context, id task.ID, req PatchScheduleRequest) (*task.Schedule, error) {
	return c.schedule(ctx, http.MethodPatch, schedulePath(id, ""), req)
}

// PauseSchedule pauses a schedule and returns it: its pending occurrence
// is cancelled and nothing fires until [Client.ResumeSchedule].
func (c *Client) PauseSchedule(ctx context.Context, id task.ID) (*task.Schedule, error) {
	return c.schedule(ctx, http.MethodPost, schedulePath(id, "/pause"), nil)
}

// ResumeSchedule resumes a paused schedule and returns it. The next
// occurrence is the rule's next time after now: the paused time is not
// caught up. An ended schedule answers [IsConflict].
func (c *Client) ResumeSchedule(ctx context.Context, id task.ID) (*task.Schedule, error) {
	return c.schedule(ctx, http.MethodPost, schedulePath(id, "/resume"), nil)
}

// DeleteSchedule deletes a schedule, freeing its key, and cancels its
// pending occurrence; occurrences already started finish. An unknown id
// answers [IsNotFound].
func (c *Client) DeleteSchedule(ctx context.Context, id task.ID) error {
	_, err := c.do(ctx, http.MethodDelete, schedulePath(id, ""), nil, nil, nil)
	return err
}

// DeleteScheduleByKey deletes app's schedule with this key, as
// [Client.DeleteSchedule].
func (c *Client) DeleteScheduleByKey(ctx context.Context, app, key string) error {
	p, err := scheduleKeyPath(app, key)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, http.MethodDelete, p, nil, nil, nil)
	return err
}

// MaxNextScheduleTimes is the most times [Client.NextScheduleTimes] asks
// for.
const MaxNextScheduleTimes = 100

// NextScheduleTimes returns the schedule's next n due times by its rule
// (1 ≤ n ≤ [MaxNextScheduleTimes]; 0 takes the server's default, 5): after
// now, or from its StartAt when that is later. Each carries the offset of
// the schedule's zone at that instant (as a fixed zone).
func (c *Client) NextScheduleTimes(ctx context.Context, id task.ID, n int) ([]time.Time, error) {
	if n < 0 || n > MaxNextScheduleTimes {
		return nil, fmt.Errorf("toc: next schedule times: n must be between 1 and %d (0 for the server's default), got %d", MaxNextScheduleTimes, n)
	}
	q := url.Values{}
	if n > 0 {
		q.Set("n", strconv.Itoa(n))
	}
	var resp struct {
		Times []time.Time `json:"times"`
	}
	if _, err := c.do(ctx, http.MethodGet, schedulePath(id, "/next"), q, nil, &resp); err != nil {
		return nil, err
	}
	return resp.Times, nil
}

func (c *Client) schedule(ctx context.Context, method, path string, in any) (*task.Schedule, error) {
	s := new(task.Schedule)
	if _, err := c.do(ctx, method, path, nil, in, s); err != nil {
		return nil, err
	}
	return s, nil
}

func schedulePath(id task.ID, suffix string) string {
	return "/v1/schedules/" + id.String() + suffix
}

func scheduleKeyPath(app, key string) (string, error) {
	if app == "" {
		return "", errors.New("toc: app is required")
	}
	if key == "" {
		return "", errors.New("toc: key is required")
	}
	return "/v1/apps/" + pathSegment(app) + "/schedules/" + pathSegment(key), nil
}
