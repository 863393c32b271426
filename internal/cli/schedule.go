package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

const scheduleHelp = `
Schedules a task and prints it as JSON. Says "created" on stderr, or "exists"
when the app already has a task with this --key (printed unchanged).

The task fires --in a duration from the server's now, or --at a time. It is
delivered by POSTing its payload to --url, or with --pull to consumers that
claim the app's tasks.

Example:
  toc schedule --app billing --key order-42 --in 30m \
    --url https://billing.internal/expire --payload '{"order":42}'
`

// headerFlag collects repeated --header 'Name: value' flags.
type headerFlag map[string]string

func (h headerFlag) String() string { return "" }

func (h headerFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if !ok || name == "" {
		return fmt.Errorf("want 'Name: value', got %q", s)
	}
	h[name] = value
	return nil
}

func runSchedule(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "schedule", scheduleHelp)
	conn := addConnFlags(fs)
	app := fs.String("app", "", "`app` the task belongs to (required)")
	key := fs.String("key", "", "idempotency `key`: while the app has a task with it, scheduling returns that task")
	in := fs.Duration("in", 0, "fire after this `duration`, like 30s or 2h45m")
	at := fs.String("at", "", "fire at this `time`, in RFC 3339 like 2026-03-01T12:00:00Z")
	target := fs.String("url", "", "deliver by POSTing the payload to this http(s) `URL`")
	pull := fs.Bool("pull", false, "deliver to consumers that claim the app's tasks")
	payload := fs.String("payload", "", "payload, a `JSON` value")
	headers := headerFlag{}
	fs.Var(headers, "header", "add the header `'Name: value'` to the POST to --url (repeatable)")
	deadline := fs.String("deadline", "", "expire the task at this `time` (RFC 3339) if not delivered by then")
	maxAttempts := fs.Int("max-attempts", 0, "most delivery attempts, the first included (default: the server's)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := noArgs("schedule", pos); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	req := client.ScheduleRequest{App: *app, Key: *key}
	switch {
	case *app == "":
		return usagef("schedule: --app is required")
	case set["in"] && set["at"]:
		return usagef("schedule: give --in or --at, not both")
	case set["in"]:
		if *in < 0 {
			return usagef("schedule: --in must not be negative, got %s", *in)
		}
		if *in == 0 {
			now := time.Now().UTC()
			req.DueAt = &now // a zero delay would be left out of the request
		}
		req.Delay = task.Duration(*in)
	case set["at"]:
		t, err := parseTime("schedule", "at", *at)
		if err != nil {
			return err
		}
		req.DueAt = &t
	default:
		return usagef("schedule: --in or --at is required")
	}
	switch {
	case set["url"] && *pull:
		return usagef("schedule: give --url or --pull, not both")
	case set["url"]:
		if *target == "" {
			return usagef("schedule: --url must not be empty")
		}
		req.Target.HTTP = &task.HTTPTarget{URL: *target}
		if len(headers) > 0 {
			req.Target.HTTP.Headers = headers
		}
	case *pull:
		if len(headers) > 0 {
			return usagef("schedule: --header needs --url")
		}
		req.Target.Pull = &task.PullTarget{}
	default:
		return usagef("schedule: --url or --pull is required")
	}
	if set["payload"] {
		if req.Payload, err = payloadArg("schedule", *payload); err != nil {
			return err
		}
	}
	if set["deadline"] {
		t, err := parseTime("schedule", "deadline", *deadline)
		if err != nil {
			return err
		}
		req.Deadline = &t
	}
	if req.Retry, err = maxAttemptsArg("schedule", *maxAttempts); err != nil {
		return err
	}
	c, err := conn.client(e, "schedule")
	if err != nil {
		return err
	}

	t, created, err := c.Schedule(ctx, req)
	if err != nil {
		return err
	}
	return printCreated(e, t, created)
}

// printCreated prints v, what a create call returned, as JSON, and on
// stderr "created", or "exists" when the call found v already there.
func printCreated(e *env, v any, created bool) error {
	if err := printJSON(e.stdout, v); err != nil {
		return err
	}
	if created {
		fmt.Fprintln(e.stderr, "created")
	} else {
		fmt.Fprintln(e.stderr, "exists")
	}
	return nil
}

// payloadArg reads --payload, a JSON value.
func payloadArg(cmd, s string) (json.RawMessage, error) {
	if !json.Valid([]byte(s)) {
		return nil, usagef("%s: --payload must be a JSON value (quote text: --payload '\"text\"'), got %q", cmd, s)
	}
	return json.RawMessage(s), nil
}

// maxAttemptsArg reads --max-attempts: the retry policy to send, nil for
// 0 (the server's).
func maxAttemptsArg(cmd string, n int) (*task.RetryPolicy, error) {
	if n < 0 {
		return nil, usagef("%s: --max-attempts must not be negative, got %d", cmd, n)
	}
	if n == 0 {
		return nil, nil
	}
	return &task.RetryPolicy{MaxAttempts: n}, nil
}

// parseTime reads an RFC 3339 time given to --name.
func parseTime(cmd, name, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usagef("%s: --%s: want an RFC 3339 time like 2026-03-01T12:00:00Z, got %q", cmd, name, s)
	}
	return t, nil
}
