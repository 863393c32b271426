package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

const bulkHelp = `
Retries or cancels every task of an app that a filter matches, and prints
how many it changed.

  retry   dead tasks (or with --state expired, expired ones) fire again now,
          attempts reset, deadline cleared
  cancel  scheduled tasks are cancelled

--key-prefix, --due-after (inclusive) and --due-before (exclusive) narrow
the match; the times are compared with each task's due_at. Without any of
them, --all confirms that every task in the state is meant.

The server changes up to 100000 tasks a request (--limit: fewer); when
there are more, the command repeats the request until none are left,
noting its progress on stderr; at the end it prints what it did ("retried
40000 tasks"). Repeating the command is safe: a task
changed has left the state. Tasks retried while their endpoint still fails
may die again, and a later run retries them again.

Examples:
  toc bulk retry --app billing --all
  toc bulk retry --app billing --key-prefix refund/ --due-after 2026-03-01T09:00:00Z --due-before 2026-03-01T10:00:00Z
  toc bulk cancel --app shop --key-prefix promo/
`

// runBulk is "toc bulk retry|cancel": the filtered form of retry and
// cancel, which name one task.
func runBulk(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bulk", bulkHelp)
	conn := addConnFlags(fs)
	app := fs.String("app", "", "`app` whose tasks to change (required)")
	state := fs.String("state", "", "`state` of the tasks: dead (retry's default) or expired; scheduled (cancel's)")
	prefix := fs.String("key-prefix", "", "only tasks whose key starts with `prefix`")
	after := fs.String("due-after", "", "only tasks due at or after this `time` (RFC 3339)")
	before := fs.String("due-before", "", "only tasks due before this `time` (RFC 3339)")
	limit := fs.Int("limit", 0, fmt.Sprintf("most tasks per request, 1 to %d (default: the server's, %d)", bulkMax, bulkMax))
	all := fs.Bool("all", false, "change every task in the state (needed when no other filter is given)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if len(pos) == 0 {
		return usagef("bulk: give an action: retry or cancel")
	}
	action := pos[0]
	if err := noArgs("bulk "+action, pos[1:]); err != nil {
		return err
	}
	var states []task.State // the states the action takes, its default first
	switch action {
	case "retry":
		states = []task.State{task.Dead, task.Expired}
	case "cancel":
		states = []task.State{task.Scheduled}
	default:
		return usagef("bulk: unknown action %q: want retry or cancel", action)
	}
	cmd := "bulk " + action
	f := client.BulkFilter{State: states[0], KeyPrefix: *prefix, Limit: *limit}
	if *state != "" {
		f.State = task.State(*state)
		if !slices.Contains(states, f.State) {
			return usagef("%s: --state: want %s, got %q", cmd, statesOr(states), *state)
		}
	}
	if *after != "" {
		t, err := parseTime(cmd, "due-after", *after)
		if err != nil {
			return err
		}
		f.DueAfter = &t
	}
	if *before != "" {
		t, err := parseTime(cmd, "due-before", *before)
		if err != nil {
			return err
		}
		f.DueBefore = &t
	}
	switch {
	case *app == "":
		return usagef("%s: --app is required", cmd)
	case *limit < 0 || *limit > bulkMax:
		return usagef("%s: --limit must be between 1 and %d, got %d", cmd, bulkMax, *limit)
	case f.DueAfter != nil && f.DueBefore != nil && !f.DueBefore.After(*f.DueAfter):
		return usagef("%s: --due-before must be after --due-after", cmd)
	case !*all && *prefix == "" && *after == "" && *before == "":
		return usagef("%s: this would change every %s task of app %s: narrow it with --key-prefix, --due-after or --due-before, or confirm with --all",
			cmd, f.State, *app)
	}
	c, err := conn.client(e, "bulk")
	if err != nil {
		return err
	}
	call, done := c.RetryAll, "retried"
	if action == "cancel" {
		call, done = c.CancelAll, "cancelled"
	}

	total := 0
	for {
		res, err := call(ctx, *app, f)
		if err != nil {
			if total > 0 {
				fmt.Fprintf(e.stderr, "%s %d tasks before this error\n", done, total)
			}
			return err
		}
		total += res.Count
		if !res.More {
			break
		}
		if res.Count == 0 {
			return fmt.Errorf("%s: the server answered more with no task changed", cmd)
		}
		fmt.Fprintf(e.stderr, "%s %d tasks so far, going on\n", done, total)
	}
	_, err = fmt.Fprintf(e.stdout, "%s %d %s\n", done, total, plural(total, "task", "tasks"))
	return err
}

// bulkMax is the most tasks the server changes in one bulk request.
const bulkMax = 100_000

// statesOr writes states as "dead or expired".
func statesOr(states []task.State) string {
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return strings.Join(s, " or ")
}

// plural is one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
