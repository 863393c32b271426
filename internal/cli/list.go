package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

const listHelp = `
Lists an app's tasks in one state, oldest first, one line per task with tab
separated columns:

  id  state  due_at  key  attempts  last_error

("-" for an empty key or error). Without --all it prints one page and, when
there are more, the --cursor of the next page on stderr. --json prints
{"tasks":[...],"next_cursor":"..."} instead (with --all, every task and no
cursor).

Example:
  toc list --app billing --state dead --all
`

func runList(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "list", listHelp)
	conn := addConnFlags(fs)
	app := fs.String("app", "", "`app` whose tasks to list (required)")
	state := fs.String("state", "", "`state` to list (required): "+statesList())
	limit := fs.Int("limit", 0, "most tasks per page (default: the server's)")
	cursor := fs.String("cursor", "", "start at this `cursor`, from a previous page")
	all := fs.Bool("all", false, "follow the cursor to the last page")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := noArgs("list", pos); err != nil {
		return err
	}
	switch st := task.State(*state); {
	case *app == "":
		return usagef("list: --app is required")
	case *state == "":
		return usagef("list: --state is required: %s", statesList())
	case !st.Valid():
		return usagef("list: --state: want one of %s, got %q", statesList(), *state)
	case *limit < 0:
		return usagef("list: --limit must not be negative, got %d", *limit)
	}
	c, err := conn.client(e, "list")
	if err != nil {
		return err
	}

	opts := &client.ListOptions{Limit: *limit, Cursor: *cursor}
	var tasks []*task.Task // kept for --json
	for {
		page, err := c.List(ctx, *app, task.State(*state), opts)
		if err != nil {
			return err
		}
		if *asJSON {
			tasks = append(tasks, page.Tasks...)
		} else if err := printLines(e.stdout, page.Tasks); err != nil {
			return err
		}
		if page.NextCursor == "" {
			break
		}
		if !*all {
			if *asJSON {
				return printJSON(e.stdout, page)
			}
			fmt.Fprintf(e.stderr, "more: --cursor %s\n", page.NextCursor)
			return nil
		}
		if page.NextCursor == opts.Cursor {
			return fmt.Errorf("list: the server answered cursor %q with the same cursor", opts.Cursor)
		}
		opts.Cursor = page.NextCursor
	}
	if *asJSON {
		return printJSON(e.stdout, &client.ListPage{Tasks: append([]*task.Task{}, tasks...)})
	}
	return nil
}

func statesList() string {
	s := make([]string, len(task.States))
	for i, st := range task.States {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

func printLines(w io.Writer, tasks []*task.Task) error {
	var b strings.Builder
	for _, t := range tasks {
		b.WriteString(t.ID.String())
		b.WriteByte('\t')
		b.WriteString(string(t.State))
		b.WriteByte('\t')
		b.WriteString(t.DueAt.UTC().Format(time.RFC3339Nano))
		b.WriteByte('\t')
		b.WriteString(cell(t.Key))
		b.WriteByte('\t')
		b.WriteString(strconv.Itoa(t.Attempts))
		b.WriteByte('\t')
		b.WriteString(cell(t.LastError))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cell makes s one tab-free, line-free column; "-" when empty.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Join(strings.Fields(s), " ")
}
