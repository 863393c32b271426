package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

// A schedule action is one subcommand of "toc schedules".
type scheduleAction struct {
	name     string
	synopsis string // after "toc schedules <name>"
	summary  string
	help     string
	run      func(ctx context.Context, e *env, args []string) error
}

func scheduleActions() []scheduleAction {
	return []scheduleAction{
		{"create", "--app A --key K (--cron EXPR | --every D) [--timezone Z] [--url URL | --pull] [flags]",
			"create a schedule and print it", schedulesCreateHelp, runSchedulesCreate},
		{"get", "(ID | --app A --key K) [flags]", "print a schedule", schedulesGetHelp, runSchedulesGet},
		{"list", "--app A [--limit N] [--cursor C] [--all] [--json] [flags]", "list an app's schedules", schedulesListHelp, runSchedulesList},
		{"pause", "(ID | --app A --key K) [flags]", "pause a schedule: its pending occurrence is cancelled", schedulesPauseHelp, runSchedulesPause},
		{"resume", "(ID | --app A --key K) [flags]", "resume a paused schedule from now", schedulesResumeHelp, runSchedulesResume},
		{"delete", "(ID | --app A --key K) [flags]", "delete a schedule and cancel its pending occurrence", schedulesDeleteHelp, runSchedulesDelete},
		{"next", "(ID | --app A --key K) [-n N] [flags]", "print a schedule's next due times", schedulesNextHelp, runSchedulesNext},
	}
}

const schedulesHelp = `
Creates and manages recurring schedules. A schedule makes an ordinary task of
its app, an occurrence, at each time of its rule: a cron expression or a
fixed interval (--every), evaluated in its time zone. Each occurrence has the
key <schedule key>@<due time, RFC 3339 UTC with milliseconds>, so cancelling
it (toc cancel --app A --key K@T) skips that one time.

Run "toc schedules <action> -h" for an action's flags.

Examples:
  toc schedules create --app shop --key daily-report --cron '0 9 * * MON-FRI' \
    --timezone Europe/Berlin --url https://shop.internal/report
  toc schedules create --app shop --key reconcile --every 15m --url https://shop.internal/reconcile
  toc schedules next --app shop --key daily-report -n 3
  toc schedules pause --app shop --key daily-report
`

// runSchedules is "toc schedules ACTION": the action comes first, its
// flags after it.
func runSchedules(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		printSchedulesUsage(e.stderr)
		return usagef("schedules: give an action: %s", actionNames())
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		printSchedulesUsage(e.stderr)
		return nil
	}
	for _, a := range scheduleActions() {
		if a.name == args[0] {
			return a.run(ctx, e, args[1:])
		}
	}
	printSchedulesUsage(e.stderr)
	if strings.HasPrefix(args[0], "-") {
		return usagef("schedules: give the action first (%s), then its flags; got %q", actionNames(), args[0])
	}
	return usagef("schedules: unknown action %q: want %s", args[0], actionNames())
}

func actionNames() string {
	var names []string
	for _, a := range scheduleActions() {
		names = append(names, a.name)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// printSchedulesUsage prints the command's usage: its actions and the
// flags they all take.
func printSchedulesUsage(w io.Writer) {
	c, _ := lookup("schedules")
	fmt.Fprintf(w, "usage: toc schedules %s\n\n%s\n\nactions:\n", c.synopsis, strings.TrimSpace(schedulesHelp))
	for _, a := range scheduleActions() {
		fmt.Fprintf(w, "  %-7s %s\n", a.name, a.summary)
	}
	fmt.Fprint(w, "\nflags of every action:\n")
	fs := flag.NewFlagSet("toc schedules", flag.ContinueOnError)
	fs.SetOutput(w)
	addConnFlags(fs)
	fs.PrintDefaults()
}

// newActionFlagSet returns the flag set of one action, printing to
// e.stderr.
func newActionFlagSet(e *env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("toc schedules "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var a scheduleAction
	for _, x := range scheduleActions() {
		if x.name == name {
			a = x
		}
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: toc schedules %s %s\n\n%s\n\nflags:\n", name, a.synopsis, strings.TrimSpace(a.help))
		fs.PrintDefaults()
	}
	return fs
}

// addScheduleRefFlags adds --app and --key, the other way to name a
// schedule.
func addScheduleRefFlags(fs *flag.FlagSet) (app, key *string) {
	app = fs.String("app", "", "`app` of the schedule, with --key, instead of an ID")
	key = fs.String("key", "", "`key` of the schedule, with --app, instead of an ID")
	return app, key
}

// scheduleCall parses the flags of an action that names one schedule and
// returns the schedule's reference and a client.
func scheduleCall(e *env, fs *flag.FlagSet, cmd string, args []string) (taskRef, *client.Client, error) {
	conn := addConnFlags(fs)
	app, key := addScheduleRefFlags(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return taskRef{}, nil, err
	}
	ref, err := resolveRefOf(cmd, "schedule", pos, *app, *key)
	if err != nil {
		return taskRef{}, nil, err
	}
	c, err := conn.client(e, cmd)
	return ref, c, err
}

// scheduleID returns the id of the schedule ref names, asking the server
// for it when ref is an app and a key.
func scheduleID(ctx context.Context, c *client.Client, ref taskRef) (task.ID, error) {
	if !ref.byKey() {
		return ref.id, nil
	}
	s, err := c.GetScheduleByKey(ctx, ref.app, ref.key)
	if err != nil {
		return task.ID{}, err
	}
	return s.ID, nil
}

const schedulesCreateHelp = `
Creates a schedule and prints it as JSON. Says "created" on stderr, or
"exists" when the app already has a schedule with this --key (printed
unchanged: change it with the API's PATCH, or delete it and create it
again).

The rule is --cron (5 fields: minute hour day-of-month month day-of-week, or
6 with a leading seconds field; names like MON and JAN, ranges, lists,
steps; @hourly @daily @weekly @monthly @yearly), evaluated in --timezone, or
--every, a fixed interval of at least 1s counted from --start-at (else from
now). Each occurrence is delivered by POSTing the payload to --url, or with
--pull to consumers that claim the app's tasks; with neither, by the app's
default target.

--catch-up says what happens to the occurrences missed while toc was down:
skip them, make the latest one at once (one, the default), or make every one
(all, the most recent 1000), oldest first.

Examples:
  toc schedules create --app shop --key daily-report --cron '0 9 * * MON-FRI' \
    --timezone Europe/Berlin --url https://shop.internal/report --payload '{"kind":"daily"}'
  toc schedules create --app shop --key reconcile --every 15m --pull --catch-up skip
`

func runSchedulesCreate(ctx context.Context, e *env, args []string) error {
	const cmd = "schedules create"
	fs := newActionFlagSet(e, "create")
	conn := addConnFlags(fs)
	app := fs.String("app", "", "`app` the schedule belongs to (required)")
	key := fs.String("key", "", "the schedule's `key` within the app (required): while it exists, creating returns it")
	cron := fs.String("cron", "", "cron `expression`, like '0 9 * * MON-FRI' or @daily")
	every := fs.Duration("every", 0, "fixed `interval`, like 15m or 24h (at least 1s)")
	zone := fs.String("timezone", "", "IANA time `zone` the cron rule is read in, like Europe/Berlin (default UTC)")
	startAt := fs.String("start-at", "", "no occurrence before this `time` (RFC 3339); --every counts from it")
	endAt := fs.String("end-at", "", "no occurrence after this `time` (RFC 3339)")
	catchUp := fs.String("catch-up", "", "`policy` for the occurrences missed while toc was down: skip, one or all (default one)")
	target := fs.String("url", "", "deliver each occurrence by POSTing the payload to this http(s) `URL`")
	pull := fs.Bool("pull", false, "deliver each occurrence to consumers that claim the app's tasks")
	payload := fs.String("payload", "", "payload of each occurrence, a `JSON` value")
	headers := headerFlag{}
	fs.Var(headers, "header", "add the header `'Name: value'` to the POST to --url (repeatable)")
	deadlineAfter := fs.Duration("deadline-after", 0, "expire each occurrence this `duration` after its due time if not delivered by then")
	maxAttempts := fs.Int("max-attempts", 0, "most delivery attempts of each occurrence, the first included (default: the server's)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := noArgs(cmd, pos); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	req := client.CreateScheduleRequest{App: *app, Key: *key, Cron: *cron, Timezone: *zone, CatchUp: task.CatchUp(*catchUp)}
	switch {
	case *app == "":
		return usagef("%s: --app is required", cmd)
	case *key == "":
		return usagef("%s: --key is required", cmd)
	case set["cron"] && set["every"]:
		return usagef("%s: give --cron or --every, not both", cmd)
	case set["cron"] && *cron == "":
		return usagef("%s: --cron must not be empty", cmd)
	case set["every"]:
		if *every < task.MinEvery {
			return usagef("%s: --every must be at least %s, got %s", cmd, task.MinEvery, *every)
		}
		req.Every = task.Duration(*every)
	case !set["cron"]:
		return usagef("%s: --cron or --every is required", cmd)
	}
	switch req.CatchUp {
	case "", task.CatchUpSkip, task.CatchUpOne, task.CatchUpAll:
	default:
		return usagef("%s: --catch-up: want skip, one or all, got %q", cmd, *catchUp)
	}
	if set["start-at"] {
		t, err := parseTime(cmd, "start-at", *startAt)
		if err != nil {
			return err
		}
		req.StartAt = &t
	}
	if set["end-at"] {
		t, err := parseTime(cmd, "end-at", *endAt)
		if err != nil {
			return err
		}
		req.EndAt = &t
	}
	if req.StartAt != nil && req.EndAt != nil && req.EndAt.Before(*req.StartAt) {
		return usagef("%s: --end-at must not be before --start-at", cmd)
	}
	switch {
	case set["url"] && *pull:
		return usagef("%s: give --url or --pull, not both", cmd)
	case set["url"]:
		if *target == "" {
			return usagef("%s: --url must not be empty", cmd)
		}
		req.Target.HTTP = &task.HTTPTarget{URL: *target}
		if len(headers) > 0 {
			req.Target.HTTP.Headers = headers
		}
	case len(headers) > 0:
		return usagef("%s: --header needs --url", cmd)
	case *pull:
		req.Target.Pull = &task.PullTarget{}
	}
	if set["payload"] {
		if req.Payload, err = payloadArg(cmd, *payload); err != nil {
			return err
		}
	}
	if set["deadline-after"] {
		if *deadlineAfter <= 0 {
			return usagef("%s: --deadline-after must be positive, got %s", cmd, *deadlineAfter)
		}
		req.DeadlineAfter = task.Duration(*deadlineAfter)
	}
	if req.Retry, err = maxAttemptsArg(cmd, *maxAttempts); err != nil {
		return err
	}
	c, err := conn.client(e, cmd)
	if err != nil {
		return err
	}

	s, created, err := c.CreateSchedule(ctx, req)
	if err != nil {
		return err
	}
	return printCreated(e, s, created)
}

const schedulesGetHelp = `
Prints a schedule as JSON, named by its ID or by its app and key.

Examples:
  toc schedules get 01JD8X5C2M0000ABCDEFGHJKMN
  toc schedules get --app shop --key daily-report
`

func runSchedulesGet(ctx context.Context, e *env, args []string) error {
	ref, c, err := scheduleCall(e, newActionFlagSet(e, "get"), "schedules get", args)
	if err != nil {
		return helpOK(err)
	}
	var s *task.Schedule
	if ref.byKey() {
		s, err = c.GetScheduleByKey(ctx, ref.app, ref.key)
	} else {
		s, err = c.GetSchedule(ctx, ref.id)
	}
	if err != nil {
		return err
	}
	return printJSON(e.stdout, s)
}

const schedulesListHelp = `
Lists an app's schedules, oldest first, one line per schedule with tab
separated columns:

  id  state  rule  timezone  next_at  last_at  key

(rule is the cron expression or "every D"; "-" for a time there is none of).
Without --all it prints one page and, when there are more, the --cursor of
the next page on stderr. --json prints {"schedules":[...],"next_cursor":"..."}
instead (with --all, every schedule and no cursor).

Example:
  toc schedules list --app shop --all
`

func runSchedulesList(ctx context.Context, e *env, args []string) error {
	const cmd = "schedules list"
	fs := newActionFlagSet(e, "list")
	conn := addConnFlags(fs)
	app := fs.String("app", "", "`app` whose schedules to list (required)")
	pf := addPageFlags(fs, "schedules")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := noArgs(cmd, pos); err != nil {
		return err
	}
	switch {
	case *app == "":
		return usagef("%s: --app is required", cmd)
	case *pf.limit < 0:
		return usagef("%s: --limit must not be negative, got %d", cmd, *pf.limit)
	}
	c, err := conn.client(e, cmd)
	if err != nil {
		return err
	}

	l := listing[*task.Schedule]{
		cmd: cmd,
		page: func(ctx context.Context, cursor string) (any, []*task.Schedule, string, error) {
			p, err := c.ListSchedules(ctx, *app, &client.ListSchedulesOptions{Limit: *pf.limit, Cursor: cursor})
			if err != nil {
				return nil, nil, "", err
			}
			return p, p.Schedules, p.NextCursor, nil
		},
		lines: printScheduleLines,
		whole: func(ss []*task.Schedule) any { return &client.SchedulesPage{Schedules: ss} },
	}
	return l.print(ctx, e, pf)
}

// ruleText is a schedule's rule as one column: its cron expression or
// "every 15m0s".
func ruleText(s *task.Schedule) string {
	if s.Cron != "" {
		return s.Cron
	}
	return "every " + s.Every.Std().String()
}

func timeCell(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func printScheduleLines(w io.Writer, ss []*task.Schedule) error {
	var b strings.Builder
	for _, s := range ss {
		for i, col := range []string{s.ID.String(), string(s.State), cell(ruleText(s)), cell(s.Timezone),
			timeCell(s.NextAt), timeCell(s.LastAt), cell(s.Key)} {
			if i > 0 {
				b.WriteByte('\t')
			}
			b.WriteString(col)
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

const schedulesPauseHelp = `
Pauses a schedule and prints it as JSON: its pending occurrence is
cancelled and nothing fires until it is resumed. Named by its ID or by its
app and key.

Example:
  toc schedules pause --app shop --key daily-report
`

func runSchedulesPause(ctx context.Context, e *env, args []string) error {
	return setSchedulePaused(ctx, e, "pause", args)
}

const schedulesResumeHelp = `
Resumes a paused schedule and prints it as JSON. The next occurrence is the
rule's next time after now: the times it was paused through are not caught
up. An ended schedule cannot be resumed.

Example:
  toc schedules resume --app shop --key daily-report
`

func runSchedulesResume(ctx context.Context, e *env, args []string) error {
	return setSchedulePaused(ctx, e, "resume", args)
}

func setSchedulePaused(ctx context.Context, e *env, action string, args []string) error {
	ref, c, err := scheduleCall(e, newActionFlagSet(e, action), "schedules "+action, args)
	if err != nil {
		return helpOK(err)
	}
	id, err := scheduleID(ctx, c, ref)
	if err != nil {
		return err
	}
	call := c.PauseSchedule
	if action == "resume" {
		call = c.ResumeSchedule
	}
	s, err := call(ctx, id)
	if err != nil {
		return err
	}
	return printJSON(e.stdout, s)
}

const schedulesDeleteHelp = `
Deletes a schedule, named by its ID or by its app and key, and says
"deleted" on stderr. Its pending occurrence is cancelled; occurrences
already being delivered finish. Its key is free again.

Examples:
  toc schedules delete 01JD8X5C2M0000ABCDEFGHJKMN
  toc schedules delete --app shop --key daily-report
`

func runSchedulesDelete(ctx context.Context, e *env, args []string) error {
	ref, c, err := scheduleCall(e, newActionFlagSet(e, "delete"), "schedules delete", args)
	if err != nil {
		return helpOK(err)
	}
	if ref.byKey() {
		err = c.DeleteScheduleByKey(ctx, ref.app, ref.key)
	} else {
		err = c.DeleteSchedule(ctx, ref.id)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "deleted schedule %s\n", ref)
	return nil
}

const schedulesNextHelp = `
Prints a schedule's next due times by its rule, one a line, in RFC 3339
with the offset of the schedule's zone: after now, or from its start_at when
that is later. Use it to check a cron expression and its time zone.

Example:
  toc schedules next --app shop --key daily-report -n 10
`

func runSchedulesNext(ctx context.Context, e *env, args []string) error {
	const cmd = "schedules next"
	fs := newActionFlagSet(e, "next")
	n := fs.Int("n", 5, fmt.Sprintf("how many `times`, 1 to %d", client.MaxNextScheduleTimes))
	ref, c, err := scheduleCall(e, fs, cmd, args)
	if err != nil {
		return helpOK(err)
	}
	if *n < 1 || *n > client.MaxNextScheduleTimes {
		return usagef("%s: -n must be between 1 and %d, got %d", cmd, client.MaxNextScheduleTimes, *n)
	}
	id, err := scheduleID(ctx, c, ref)
	if err != nil {
		return err
	}
	times, err := c.NextScheduleTimes(ctx, id, *n)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, t := range times {
		b.WriteString(t.Format(time.RFC3339Nano))
		b.WriteByte('\n')
	}
	_, err = io.WriteString(e.stdout, b.String())
	return err
}
