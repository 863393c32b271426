package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

func sampleSchedule() *task.Schedule {
	start, end := t0, t0.Add(30*24*time.Hour)
	next, last := t0.Add(24*time.Hour), t0.Add(-24*time.Hour)
	return &task.Schedule{
		ID:            id1,
		App:           "shop",
		Key:           "daily-report",
		Cron:          "0 9 * * MON-FRI",
		Timezone:      "Europe/Berlin",
		StartAt:       &start,
		EndAt:         &end,
		CatchUp:       task.CatchUpOne,
		State:         task.ScheduleActive,
		NextAt:        &next,
		LastAt:        &last,
		CreatedAt:     t0.Add(-48 * time.Hour),
		UpdatedAt:     t0.Add(-24 * time.Hour),
		Payload:       []byte(`{"report":"daily"}`),
		Target:        task.Target{HTTP: &task.HTTPTarget{URL: "https://example.com/report"}},
		Retry:         task.RetryPolicy{MaxAttempts: 3, MinBackoff: task.Duration(time.Second), MaxBackoff: task.Duration(time.Minute)},
		DeadlineAfter: task.Duration(10 * time.Minute),
	}
}

func TestCreateScheduleEncodesEveryField(t *testing.T) {
	t.Parallel()
	want := sampleSchedule()
	c, f := setup(t, reply{201, jsonOf(t, want)})

	start, end := t0, t0.Add(30*24*time.Hour)
	got, created, err := c.CreateSchedule(context.Background(), client.CreateScheduleRequest{
		App:           "shop",
		Key:           "daily-report",
		Cron:          "0 9 * * MON-FRI",
		Timezone:      "Europe/Berlin",
		StartAt:       &start,
		EndAt:         &end,
		CatchUp:       task.CatchUpAll,
		Payload:       json.RawMessage(`{"report":"daily"}`),
		Target:        task.Target{HTTP: &task.HTTPTarget{URL: "https://example.com/report", Headers: map[string]string{"X-Tenant": "7"}}},
		Retry:         &task.RetryPolicy{MaxAttempts: 3},
		DeadlineAfter: task.Duration(10 * time.Minute),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Error("created = false on a 201")
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("schedule mismatch (-want +got):\n%s", d)
	}
	s := f.last(t)
	checkRoute(t, s, "POST /v1/schedules", nil)
	checkJSON(t, "body", `{
		"app": "shop",
		"key": "daily-report",
		"cron": "0 9 * * MON-FRI",
		"timezone": "Europe/Berlin",
		"start_at": "2026-03-01T12:00:00Z",
		"end_at": "2026-03-31T12:00:00Z",
		"catch_up": "all",
		"payload": {"report": "daily"},
		"target": {"http": {"url": "https://example.com/report", "headers": {"X-Tenant": "7"}}},
		"retry": {"max_attempts": 3},
		"deadline_after": "10m0s"
	}`, s.Body)
	if got := s.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
}

// TestCreateScheduleOmitsZeroFields: an every-schedule with the app's
// default target; a 200 is the existing schedule of the key.
func TestCreateScheduleOmitsZeroFields(t *testing.T) {
	t.Parallel()
	existing := sampleSchedule()
	c, f := setup(t, reply{200, jsonOf(t, existing)})
	got, created, err := c.CreateSchedule(context.Background(), client.CreateScheduleRequest{
		App:           "shop",
		Key:           "reconcile",
		Every:         task.Duration(15 * time.Minute),
		PayloadBase64: []byte{0, 1, 0xFF},
	})
	if err != nil {
		t.Fatal(err)
	}
	if created {
		t.Error("created = true on a 200 (existing schedule)")
	}
	if d := cmp.Diff(existing, got); d != "" {
		t.Errorf("schedule mismatch (-want +got):\n%s", d)
	}
	checkJSON(t, "body", `{"app":"shop","key":"reconcile","every":"15m0s","payload_base64":"AAH/","target":{}}`, f.last(t).Body)
}

func TestPatchScheduleBody(t *testing.T) {
	t.Parallel()
	at := t0
	for _, tt := range []struct {
		name string
		req  client.PatchScheduleRequest
		want string
	}{
		{"nothing", client.PatchScheduleRequest{}, `{}`},
		{"rule", client.PatchScheduleRequest{Every: task.Duration(time.Hour), Timezone: "Asia/Tokyo", CatchUp: task.CatchUpSkip},
			`{"every":"1h0m0s","timezone":"Asia/Tokyo","catch_up":"skip"}`},
		{"set", client.PatchScheduleRequest{Cron: "@daily", StartAt: &at, EndAt: &at, DeadlineAfter: task.Duration(time.Minute),
			Target: &task.Target{Pull: &task.PullTarget{}}, Retry: &task.RetryPolicy{MaxAttempts: 9}, Payload: json.RawMessage(`[1]`)},
			`{"cron":"@daily","start_at":"2026-03-01T12:00:00Z","end_at":"2026-03-01T12:00:00Z","deadline_after":"1m0s",
			  "target":{"pull":{}},"retry":{"max_attempts":9},"payload":[1]}`},
		{"clear", client.PatchScheduleRequest{ClearStartAt: true, ClearEndAt: true, ClearDeadlineAfter: true, PayloadBase64: []byte("x")},
			`{"start_at":null,"end_at":null,"deadline_after":null,"payload_base64":"eA=="}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, f := setup(t, reply{200, jsonOf(t, sampleSchedule())})
			if _, err := c.PatchSchedule(context.Background(), id1, tt.req); err != nil {
				t.Fatal(err)
			}
			s := f.last(t)
			checkRoute(t, s, "PATCH /v1/schedules/{id}", map[string]string{"id": id1.String()})
			checkJSON(t, "body", tt.want, s.Body)
		})
	}
}

func TestPatchScheduleRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	at := t0
	c, f := setup(t, reply{200, jsonOf(t, sampleSchedule())})
	for _, tt := range []struct {
		req  client.PatchScheduleRequest
		want string
	}{
		{client.PatchScheduleRequest{Cron: "@daily", Every: task.Duration(time.Hour)}, "give Cron or Every, not both"},
		{client.PatchScheduleRequest{StartAt: &at, ClearStartAt: true}, "give StartAt or ClearStartAt, not both"},
		{client.PatchScheduleRequest{EndAt: &at, ClearEndAt: true}, "give EndAt or ClearEndAt, not both"},
		{client.PatchScheduleRequest{DeadlineAfter: 1, ClearDeadlineAfter: true}, "give DeadlineAfter or ClearDeadlineAfter, not both"},
	} {
		if _, err := c.PatchSchedule(context.Background(), id1, tt.req); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("err = %v, want %q", err, tt.want)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("sent %d requests", n)
	}
}

// TestScheduleRoutes checks each schedule call's method, path, query and
// body, and what it returns.
func TestScheduleRoutes(t *testing.T) {
	t.Parallel()
	s := sampleSchedule()
	paused := sampleSchedule()
	paused.State, paused.NextAt = task.SchedulePaused, nil
	berlin := time.FixedZone("", 3600)
	tests := []struct {
		name    string
		reply   reply
		call    func(context.Context, *client.Client) (any, error)
		pattern string
		vars    map[string]string
		query   url.Values
		body    string // JSON; "" for no body
		want    any
	}{
		{
			name:    "GetSchedule",
			reply:   reply{200, jsonOf(t, s)},
			call:    func(ctx context.Context, c *client.Client) (any, error) { return c.GetSchedule(ctx, id1) },
			pattern: "GET /v1/schedules/{id}",
			vars:    map[string]string{"id": id1.String()},
			want:    s,
		},
		{
			name:  "GetScheduleByKey",
			reply: reply{200, jsonOf(t, s)},
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return c.GetScheduleByKey(ctx, "shop", "daily-report")
			},
			pattern: "GET /v1/apps/{app}/schedules/{key}",
			vars:    map[string]string{"app": "shop", "key": "daily-report"},
			want:    s,
		},
		{
			name:    "ListSchedulesFirstPage",
			reply:   reply{200, `{"schedules":[` + jsonOf(t, s) + `],"next_cursor":"` + id1.String() + `"}`},
			call:    func(ctx context.Context, c *client.Client) (any, error) { return c.ListSchedules(ctx, "shop", nil) },
			pattern: "GET /v1/apps/{app}/schedules",
			vars:    map[string]string{"app": "shop"},
			want:    &client.SchedulesPage{Schedules: []*task.Schedule{s}, NextCursor: id1.String()},
		},
		{
			name:  "ListSchedulesNextPage",
			reply: reply{200, `{"schedules":[]}`},
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return c.ListSchedules(ctx, "a.b", &client.ListSchedulesOptions{Limit: 10, Cursor: id1.String()})
			},
			pattern: "GET /v1/apps/{app}/schedules",
			vars:    map[string]string{"app": "a.b"},
			query:   url.Values{"limit": {"10"}, "cursor": {id1.String()}},
			want:    &client.SchedulesPage{Schedules: []*task.Schedule{}},
		},
		{
			name:    "PauseSchedule",
			reply:   reply{200, jsonOf(t, paused)},
			call:    func(ctx context.Context, c *client.Client) (any, error) { return c.PauseSchedule(ctx, id1) },
			pattern: "POST /v1/schedules/{id}/pause",
			vars:    map[string]string{"id": id1.String()},
			want:    paused,
		},
		{
			name:    "ResumeSchedule",
			reply:   reply{200, jsonOf(t, s)},
			call:    func(ctx context.Context, c *client.Client) (any, error) { return c.ResumeSchedule(ctx, id1) },
			pattern: "POST /v1/schedules/{id}/resume",
			vars:    map[string]string{"id": id1.String()},
			want:    s,
		},
		{
			name:    "DeleteSchedule",
			reply:   reply{204, ""},
			call:    func(ctx context.Context, c *client.Client) (any, error) { return nil, c.DeleteSchedule(ctx, id1) },
			pattern: "DELETE /v1/schedules/{id}",
			vars:    map[string]string{"id": id1.String()},
		},
		{
			name:  "DeleteScheduleByKey",
			reply: reply{204, ""},
			call: func(ctx context.Context, c *client.Client) (any, error) {
				return nil, c.DeleteScheduleByKey(ctx, "shop", "a b")
			},
			pattern: "DELETE /v1/apps/{app}/schedules/{key}",
			vars:    map[string]string{"app": "shop", "key": "a b"},
		},
		{
			name:    "NextScheduleTimes",
			reply:   reply{200, `{"times":["2027-03-26T09:00:00+01:00","2027-03-29T09:00:00+02:00"]}`},
			call:    func(ctx context.Context, c *client.Client) (any, error) { return c.NextScheduleTimes(ctx, id1, 2) },
			pattern: "GET /v1/schedules/{id}/next",
			vars:    map[string]string{"id": id1.String()},
			query:   url.Values{"n": {"2"}},
			want: []time.Time{
				time.Date(2027, 3, 26, 9, 0, 0, 0, berlin),
				time.Date(2027, 3, 29, 7, 0, 0, 0, time.UTC),
			},
		},
		{
			name:    "NextScheduleTimesDefault",
			reply:   reply{200, `{"times":[]}`},
			call:    func(ctx context.Context, c *client.Client) (any, error) { return c.NextScheduleTimes(ctx, id1, 0) },
			pattern: "GET /v1/schedules/{id}/next",
			vars:    map[string]string{"id": id1.String()},
			want:    []time.Time{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, f := setup(t, tt.reply)
			got, err := tt.call(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); tt.want != nil && d != "" {
				t.Errorf("result mismatch (-want +got):\n%s", d)
			}
			s := f.last(t)
			checkRoute(t, s, tt.pattern, tt.vars)
			if tt.query == nil {
				tt.query = url.Values{}
			}
			if d := cmp.Diff(tt.query, s.Query); d != "" {
				t.Errorf("query mismatch (-want +got):\n%s", d)
			}
			if tt.body == "" && s.Body != "" {
				t.Errorf("body = %q, want none", s.Body)
			}
		})
	}
}

// TestNextScheduleTimesKeepsOffsets: each time keeps the offset the server
// wrote, the zone's at that instant.
func TestNextScheduleTimesKeepsOffsets(t *testing.T) {
	t.Parallel()
	c, _ := setup(t, reply{200, `{"times":["2027-10-31T02:30:00+02:00","2027-11-01T02:30:00+01:00"]}`})
	got, err := c.NextScheduleTimes(context.Background(), id1, 2)
	if err != nil {
		t.Fatal(err)
	}
	var offsets []int
	for _, tm := range got {
		_, off := tm.Zone()
		offsets = append(offsets, off)
	}
	if d := cmp.Diff([]int{7200, 3600}, offsets); d != "" {
		t.Errorf("offsets (-want +got):\n%s", d)
	}
}

func TestScheduleKeyEscaping(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"daily-report", "a/b", "..", ".", "100%", "a?b#c", "ünï/日本", "../../v1/schedules"} {
		t.Run(fmt.Sprintf("%q", key), func(t *testing.T) {
			t.Parallel()
			c, f := setup(t, reply{200, jsonOf(t, sampleSchedule())})
			ctx := context.Background()
			if _, err := c.GetScheduleByKey(ctx, "shop", key); err != nil {
				t.Fatalf("GetScheduleByKey: %v", err)
			}
			if err := c.DeleteScheduleByKey(ctx, "shop", key); err != nil {
				t.Fatalf("DeleteScheduleByKey: %v", err)
			}
			reqs := f.requests()
			if len(reqs) != 2 {
				t.Fatalf("server got %d requests, want 2", len(reqs))
			}
			checkRoute(t, reqs[0], "GET /v1/apps/{app}/schedules/{key}", map[string]string{"app": "shop", "key": key})
			checkRoute(t, reqs[1], "DELETE /v1/apps/{app}/schedules/{key}", map[string]string{"app": "shop", "key": key})
		})
	}
}

func TestScheduleCallsRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	c, f := setup(t, reply{200, "{}"})
	ctx := context.Background()
	for name, err := range map[string]error{
		"GetScheduleByKey no app":    second(c.GetScheduleByKey(ctx, "", "k")),
		"GetScheduleByKey no key":    second(c.GetScheduleByKey(ctx, "a", "")),
		"DeleteScheduleByKey no key": c.DeleteScheduleByKey(ctx, "a", ""),
		"ListSchedules no app":       second(c.ListSchedules(ctx, "", nil)),
		"NextScheduleTimes n -1":     second(c.NextScheduleTimes(ctx, id1, -1)),
		"NextScheduleTimes n 101":    second(c.NextScheduleTimes(ctx, id1, 101)),
		"CreateSchedule bad payload": func() error {
			_, _, err := c.CreateSchedule(ctx, client.CreateScheduleRequest{App: "a", Key: "k", Payload: json.RawMessage(`{not json`)})
			return err
		}(),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("sent %d requests", n)
	}
}

// TestScheduleErrors: the server's refusals reach the caller as *Error,
// with the field of a 400.
func TestScheduleErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name  string
		reply reply
		want  *client.Error
		text  string
	}{
		{
			name:  "bad cron",
			reply: reply{400, `{"error":{"code":"invalid_field","message":"cron: minute: 61 is above 59","field":"cron"}}`},
			want:  &client.Error{Status: 400, Code: "invalid_field", Message: "cron: minute: 61 is above 59", Field: "cron"},
			text:  "toc: cron: minute: 61 is above 59 (HTTP 400, invalid_field)",
		},
		{
			name:  "end before start",
			reply: reply{400, `{"error":{"code":"invalid_field","message":"must be after start_at","field":"end_at"}}`},
			want:  &client.Error{Status: 400, Code: "invalid_field", Message: "must be after start_at", Field: "end_at"},
			text:  "toc: end_at: must be after start_at (HTTP 400, invalid_field)",
		},
		{
			name:  "no store",
			reply: reply{501, `{"error":{"code":"not_implemented","message":"this server's store keeps no schedules"}}`},
			want:  &client.Error{Status: 501, Code: "not_implemented", Message: "this server's store keeps no schedules"},
			text:  "toc: this server's store keeps no schedules (HTTP 501, not_implemented)",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := setup(t, tt.reply)
			_, _, err := c.CreateSchedule(ctx, client.CreateScheduleRequest{App: "shop", Key: "k", Cron: "61 * * * *"})
			var got *client.Error
			if !errors.As(err, &got) {
				t.Fatalf("err = %#v, want *client.Error", err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("error mismatch (-want +got):\n%s", d)
			}
			if err.Error() != tt.text {
				t.Errorf("Error() = %q, want %q", err.Error(), tt.text)
			}
		})
	}

	// Every call reports the 404 of a schedule that is not there.
	c, _ := setup(t, reply{404, `{"error":{"code":"not_found","message":"no such schedule"}}`})
	for name, err := range map[string]error{
		"CreateSchedule":      func() error { _, _, err := c.CreateSchedule(ctx, client.CreateScheduleRequest{App: "a"}); return err }(),
		"GetSchedule":         second(c.GetSchedule(ctx, id1)),
		"GetScheduleByKey":    second(c.GetScheduleByKey(ctx, "a", "k")),
		"ListSchedules":       second(c.ListSchedules(ctx, "a", nil)),
		"PatchSchedule":       second(c.PatchSchedule(ctx, id1, client.PatchScheduleRequest{Cron: "@daily"})),
		"PauseSchedule":       second(c.PauseSchedule(ctx, id1)),
		"ResumeSchedule":      second(c.ResumeSchedule(ctx, id1)),
		"DeleteSchedule":      c.DeleteSchedule(ctx, id1),
		"DeleteScheduleByKey": c.DeleteScheduleByKey(ctx, "a", "k"),
		"NextScheduleTimes":   second(c.NextScheduleTimes(ctx, id1, 5)),
	} {
		if !client.IsNotFound(err) {
			t.Errorf("%s: err = %v, want not found", name, err)
		}
	}

	// Resuming an ended schedule is a conflict.
	c, _ = setup(t, reply{409, `{"error":{"code":"conflict","message":"toc: cannot resume schedule ` + id1.String() + `: it is ended"}}`})
	if _, err := c.ResumeSchedule(ctx, id1); !client.IsConflict(err) || !strings.Contains(err.Error(), "it is ended (HTTP 409, conflict)") {
		t.Errorf("ResumeSchedule: err = %v, want a conflict", err)
	}
}
