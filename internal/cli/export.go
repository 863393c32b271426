package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/task"
)

const exportHelp = `
Writes tasks to stdout as NDJSON, one task per line exactly as "toc get"
and GET /v1/tasks/{id} show it (ids, keys, times, states, attempts,
payloads, history), app by app and state by state, in id order; then,
unless --state is given, the schedules (recurring timers), one per line
as {"schedule": <as GET /v1/schedules/{id} shows it>}. "toc import"
re-creates them on another server, in either mode, with their ids.

Over --server (an admin token's command) it asks a running server, in
either mode. That server goes on firing meanwhile, so a task that changes
state during the export may be written twice or not at all: fine for a
copy, not for a move. With --data it reads an embedded store that no
server runs on (stop the server first), which is what a move from
embedded to cluster mode exports: nothing fires while it runs, and
nothing the file holds fires again at the source.

It prints how many tasks and schedules it wrote on stderr.

Examples:
  toc export --server http://toc.internal:7070 > tasks.ndjson
  toc export --server http://toc.internal:7070 --app billing --state dead > dead.ndjson
  toc export --data /var/lib/toc > tasks.ndjson
`

// runExport is "toc export".
func runExport(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "export", exportHelp)
	conn := addConnFlags(fs)
	app := fs.String("app", "", "only this `app`'s tasks")
	state := fs.String("state", "", "only the tasks in this `state`: "+statesList())
	data := fs.String("data", "", "read the embedded store in this `directory` (no server may run on it) instead of asking --server")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := noArgs("export", pos); err != nil {
		return err
	}
	f := engine.ExportFilter{App: *app, State: task.State(*state)}
	switch {
	case *app != "" && task.ValidateApp(*app) != nil:
		return usagef("export: --app: %v", task.ValidateApp(*app))
	case *state != "" && !f.State.Valid():
		return usagef("export: --state: want one of %s, got %q", statesList(), *state)
	case *data != "" && conn.server != "":
		return usagef("export: give --server or --data, not both")
	}
	out := bufio.NewWriterSize(e.stdout, 64<<10)
	lc := &lineCounter{w: out, start: true}
	if *data != "" {
		err = exportStore(ctx, *data, f, lc, e.stderr)
	} else {
		err = exportServer(ctx, e, conn, f, lc)
	}
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		if lc.n > 0 {
			fmt.Fprintf(e.stderr, "export: stopped after %d tasks and %d schedules\n", lc.n-lc.schedules, lc.schedules)
		}
		return err
	}
	_, err = fmt.Fprintf(e.stderr, "exported %d tasks and %d schedules\n", lc.n-lc.schedules, lc.schedules)
	return err
}

// exportServer copies the server's export to lc.
func exportServer(ctx context.Context, e *env, conn *connFlags, f engine.ExportFilter, lc *lineCounter) error {
	c, err := conn.client(e, "export")
	if err != nil {
		return err
	}
	s, err := c.Export(ctx, client.ExportOptions{App: f.App, State: f.State})
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := io.Copy(lc, s); err != nil {
		return fmt.Errorf("export: the stream broke: %w", err)
	}
	switch sent, ok := s.Count(); {
	case !ok:
		fmt.Fprintln(e.stderr, "export: the server's answer carried no count (a proxy dropped it?): it cannot be checked that every line arrived")
	case sent != lc.n:
		return fmt.Errorf("export: the server sent %d lines, %d arrived", sent, lc.n)
	}
	return nil
}

// scheduleLineStart is how an export's schedule line starts.
const scheduleLineStart = `{"schedule":`

// lineCounter counts the lines written through it, and those of them that
// are schedules (start with scheduleLineStart).
type lineCounter struct {
	w            io.Writer
	n, schedules int
	start        bool   // the next byte starts a line
	head         []byte // the first bytes of the current line, up to len(scheduleLineStart)
}

func (l *lineCounter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	for _, c := range p[:n] {
		if l.start {
			l.head, l.start = l.head[:0], false
		}
		if c == '\n' {
			l.n++
			l.start = true
			continue
		}
		if len(l.head) < len(scheduleLineStart) {
			if l.head = append(l.head, c); string(l.head) == scheduleLineStart {
				l.schedules++
			}
		}
	}
	return n, err
}

// exportStore writes the tasks and schedules of the embedded store in dir
// to out, as the server's export does.
func exportStore(ctx context.Context, dir string, f engine.ExportFilter, out io.Writer, stderr io.Writer) error {
	if err := checkStoreDir(dir); err != nil {
		return err
	}
	if err := pebblestore.CheckNotInUse(dir); err != nil {
		return fmt.Errorf("export: the store in %s is in use (does a server run on it? stop it first, or export over --server): %w", dir, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := pebblestore.Open(pebblestore.Options{Dir: dir, Logger: log})
	if err != nil {
		return fmt.Errorf("export: open the store in %s (does a server run on it? stop it first, or export over --server): %w", dir, err)
	}
	defer st.Close()
	eng, err := engine.New(engine.Config{Store: st, Logger: log}) // never started: it only reads
	if err != nil {
		return err
	}
	line := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = out.Write(append(b, '\n'))
		return err
	}
	if _, err := eng.Transfer().Export(ctx, f, func(t *task.Task) error { return line(t) }); err != nil {
		return err
	}
	if f.State != "" {
		return nil
	}
	_, err = eng.Transfer().ExportSchedules(ctx, f.App, func(s *task.Schedule) error { return line(httpapi.ExportedSchedule{Schedule: s}) })
	return err
}

// checkStoreDir fails unless dir holds an embedded store, so that a typo
// does not make an empty one.
func checkStoreDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("export: --data: %w", err)
	}
	for _, en := range entries {
		if strings.HasPrefix(en.Name(), "MANIFEST-") || strings.HasPrefix(en.Name(), "marker.manifest") {
			return nil
		}
	}
	return errors.New("export: --data " + dir + " holds no toc store")
}
