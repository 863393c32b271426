package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

const listHelp = `
Lists an app's tasks in one state (--state), or in every state one after
the other when --state is not given, one line per task with tab separated
columns:

  id  state  due_at  key  attempts  last_error

("-" for an empty key or error). Without --all it prints one page and, when
there are more, the --cursor of the next page on stderr. --json prints
{"tasks":[...],"next_cursor":"..."} instead (with --all, every task and no
cursor).

Examples:
  toc list --app billing --state dead --all
  toc list --app billing --all        # every task of the app, state by state
`

func runList(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "list", listHelp)
	conn := addConnFlags(fs)
	app := fs.String("app", "", "`app` whose tasks to list (required)")
	state := fs.String("state", "", "`state` to list, one of "+statesList()+" (default: every state in turn)")
	pf := addPageFlags(fs, "tasks")
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
	case *state != "" && !st.Valid():
		return usagef("list: --state: want one of %s, got %q", statesList(), *state)
	case *pf.limit < 0:
		return usagef("list: --limit must not be negative, got %d", *pf.limit)
	}
	c, err := conn.client(e, "list")
	if err != nil {
		return err
	}

	page := func(ctx context.Context, state task.State, cursor string) (*client.ListPage, error) {
		return c.List(ctx, *app, state, &client.ListOptions{Limit: *pf.limit, Cursor: cursor})
	}
	l := listing[*task.Task]{
		cmd: "list",
		page: func(ctx context.Context, cursor string) (any, []*task.Task, string, error) {
			var p *client.ListPage
			var err error
			if *state != "" {
				p, err = page(ctx, task.State(*state), cursor)
			} else {
				p, err = everyState(ctx, page, cursor)
			}
			if err != nil {
				return nil, nil, "", err
			}
			return p, p.Tasks, p.NextCursor, nil
		},
		lines: printLines,
		whole: func(ts []*task.Task) any { return &client.ListPage{Tasks: ts} },
	}
	return l.print(ctx, e, pf)
}

// pageFlags are the paging flags of a list command.
type pageFlags struct {
	limit       *int    // --limit: most items per page, 0 for the server's
	cursor      *string // --cursor: where to start
	all, asJSON *bool   // --all, --json
}

// addPageFlags adds --limit, --cursor, --all and --json to fs; items
// ("tasks", "schedules") names what is listed.
func addPageFlags(fs *flag.FlagSet, items string) pageFlags {
	return pageFlags{
		limit:  fs.Int("limit", 0, "most "+items+" per page (default: the server's)"),
		cursor: fs.String("cursor", "", "start at this `cursor`, from a previous page"),
		all:    fs.Bool("all", false, "follow the cursor to the last page"),
		asJSON: fs.Bool("json", false, "print JSON"),
	}
}

// A listing is what a list command pages through ("toc list", "toc
// schedules list"): items of type T.
type listing[T any] struct {
	cmd string // names the command in errors
	// page reads the page at cursor: the page as the server sent it, its
	// items and the cursor of the next page ("" on the last).
	page func(ctx context.Context, cursor string) (page any, items []T, next string, err error)
	// lines prints items, one a line.
	lines func(w io.Writer, items []T) error
	// whole is the page --json --all prints: every item, no cursor.
	whole func(items []T) any
}

// print prints l from --cursor: each page's items as lines, or with
// --json as one JSON page. Without --all it prints one page and, when there
// are more, the --cursor of the next on stderr (with --json, the page as
// the server sent it, its next_cursor included).
func (l listing[T]) print(ctx context.Context, e *env, pf pageFlags) error {
	cursor, all, asJSON := *pf.cursor, *pf.all, *pf.asJSON
	var kept []T // for --json
	for {
		page, items, next, err := l.page(ctx, cursor)
		if err != nil {
			return err
		}
		if asJSON {
			kept = append(kept, items...)
		} else if err := l.lines(e.stdout, items); err != nil {
			return err
		}
		if next == "" {
			break
		}
		if !all {
			if asJSON {
				return printJSON(e.stdout, page)
			}
			fmt.Fprintf(e.stderr, "more: --cursor %s\n", next)
			return nil
		}
		if next == cursor {
			return fmt.Errorf("%s: the server answered cursor %q with the same cursor", l.cmd, cursor)
		}
		cursor = next
	}
	if asJSON {
		return printJSON(e.stdout, l.whole(append([]T{}, kept...)))
	}
	return nil
}

// everyState reads one page of the listing of every state in turn
// (task.States' order). Its cursor is "STATE:CURSOR", the state being read
// and the server's cursor within it; a state with no task is stepped over.
func everyState(ctx context.Context, page func(context.Context, task.State, string) (*client.ListPage, error), cursor string) (*client.ListPage, error) {
	i, inner := 0, ""
	if cursor != "" {
		st, rest, ok := strings.Cut(cursor, ":")
		i = slices.Index(task.States, task.State(st))
		if !ok || i < 0 {
			return nil, usagef("list: --cursor %q is not a cursor of a listing without --state (want STATE:CURSOR)", cursor)
		}
		inner = rest
	}
	for ; i < len(task.States); i, inner = i+1, "" {
		p, err := page(ctx, task.States[i], inner)
		if err != nil {
			return nil, err
		}
		switch {
		case p.NextCursor != "":
			p.NextCursor = string(task.States[i]) + ":" + p.NextCursor
		case i+1 < len(task.States):
			if len(p.Tasks) == 0 {
				continue
			}
			p.NextCursor = string(task.States[i+1]) + ":"
		}
		return p, nil
	}
	return &client.ListPage{Tasks: []*task.Task{}}, nil
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
