package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/toc-dev/toc/client"
)

const importHelp = `
Re-creates on the server the tasks and schedules "toc export" wrote (an
admin token's command), read as NDJSON from stdin or --from: they keep
their ids, keys, times, states, attempts, payloads and history, finished
ones in their final state, in either mode. Scheduled tasks fire on their
schedule; the ones already due fire at once. A task that was being
delivered when it was exported is scheduled again, due now (at least
once). A schedule goes on from its next_at: its pending occurrence is the
one the export holds (the export writes schedules after tasks: import a
file in its order), and the occurrences due during the move are made.

Running it again is safe: a task or schedule the server has under its id
is left alone and counted as existing, so a re-run imports nothing twice.

The server checks every line as strictly as a create, and refuses a
request with a bad line before storing any of it; the command stops there
and names the line of the input. Lines are sent --batch at a time.

A task (schedule) whose app and key another task (schedule) of the server
holds is not imported: listed as "taken ID app key holder HOLDER"
("taken schedule ...").

It prints "imported N, existing N, released N, taken N; schedules
imported N, existing N, taken N" first, and on a terminal a progress line
on stderr as it goes.

Example:
  toc import --server http://toc-cluster.internal:7070 < tasks.ndjson
`

// importBodyMax bounds one request's body; importLineMax one line.
const (
	importBodyMax = 8 << 20
	importLineMax = 64 << 20
)

// runImport is "toc import".
func runImport(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "import", importHelp)
	conn := addConnFlags(fs)
	from := fs.String("from", "-", "NDJSON `file` to read (- for stdin)")
	batch := fs.Int("batch", client.ImportMax, fmt.Sprintf("tasks per request, 1 to %d", client.ImportMax))
	pos, err := parseFlags(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := noArgs("import", pos); err != nil {
		return err
	}
	if *batch < 1 || *batch > client.ImportMax {
		return usagef("import: --batch must be between 1 and %d, got %d", client.ImportMax, *batch)
	}
	c, err := conn.client(e, "import")
	if err != nil {
		return err
	}
	var in io.Reader = os.Stdin
	name := "stdin"
	if *from != "-" {
		f, err := os.Open(*from)
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		defer f.Close()
		in, name = f, *from
	}
	im := &importer{c: c, name: name, batch: *batch, progress: isTerminal(e.stderr), stderr: e.stderr}
	err = im.run(ctx, in)
	if im.progress && im.sent > 0 {
		fmt.Fprintln(e.stderr)
	}
	if err != nil {
		if im.total.Imported > 0 || im.total.Existing > 0 || im.total.SchedulesImported > 0 {
			fmt.Fprintf(e.stderr, "import: before this error: %s\n", im.summary())
		}
		return err
	}
	var b strings.Builder
	fmt.Fprintln(&b, im.summary())
	for _, k := range im.total.Taken {
		fmt.Fprintf(&b, "taken %s %s %q holder %s\n", k.ID, k.App, k.Key, k.Holder)
	}
	for _, k := range im.total.SchedulesTaken {
		fmt.Fprintf(&b, "taken schedule %s %s %q holder %s\n", k.ID, k.App, k.Key, k.Holder)
	}
	_, err = io.WriteString(e.stdout, b.String())
	return err
}

// importer sends an NDJSON stream to the server in batches.
type importer struct {
	c        *client.Client
	name     string // of the input, for errors
	batch    int
	progress bool
	stderr   io.Writer

	body  bytes.Buffer
	lines []int // the input line of each line of body
	read  int   // input lines read
	sent  int   // tasks sent
	total client.ImportResult
}

func (im *importer) run(ctx context.Context, in io.Reader) error {
	br := bufio.NewReaderSize(in, 1<<20)
	for {
		line, err := readInputLine(br)
		if len(line) > 0 || err == nil {
			im.read++
		}
		if errors.Is(err, errInputLineTooLong) {
			return fmt.Errorf("import: %s:%d: the line is longer than %d bytes", im.name, im.read, importLineMax)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("import: read %s: %w", im.name, err)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if len(im.lines) == im.batch || (len(im.lines) > 0 && im.body.Len()+len(line)+1 > importBodyMax) {
				if serr := im.send(ctx); serr != nil {
					return serr
				}
			}
			im.body.Write(line)
			im.body.WriteByte('\n')
			im.lines = append(im.lines, im.read)
		}
		if errors.Is(err, io.EOF) {
			if len(im.lines) > 0 {
				return im.send(ctx)
			}
			return nil
		}
	}
}

// send imports the lines gathered.
func (im *importer) send(ctx context.Context) error {
	res, err := im.c.Import(ctx, bytes.NewReader(im.body.Bytes()))
	if err != nil {
		return im.inputError(err)
	}
	im.sent += len(im.lines)
	im.total.Imported += res.Imported
	im.total.Existing += res.Existing
	im.total.Released += res.Released
	im.total.Taken = append(im.total.Taken, res.Taken...)
	im.total.SchedulesImported += res.SchedulesImported
	im.total.SchedulesExisting += res.SchedulesExisting
	im.total.SchedulesTaken = append(im.total.SchedulesTaken, res.SchedulesTaken...)
	im.body.Reset()
	im.lines = im.lines[:0]
	if im.progress {
		fmt.Fprintf(im.stderr, "\rimport: %d tasks sent: %s", im.sent, im.summary())
	}
	return nil
}

// inputError turns the server's "line N" (of the request) into the line of
// the input.
func (im *importer) inputError(err error) error {
	var ce *client.Error
	if errors.As(err, &ce) {
		var n int
		if _, serr := fmt.Sscanf(ce.Message, "line %d", &n); serr == nil && n >= 1 && n <= len(im.lines) {
			rest := strings.TrimPrefix(ce.Message, fmt.Sprintf("line %d", n))
			return fmt.Errorf("import: %s:%d%s (HTTP %d, %s)", im.name, im.lines[n-1], rest, ce.Status, ce.Code)
		}
		if len(im.lines) > 0 {
			return fmt.Errorf("import: the request of lines %d to %d of %s: %w", im.lines[0], im.lines[len(im.lines)-1], im.name, err)
		}
	}
	return fmt.Errorf("import: %w", err)
}

func (im *importer) summary() string {
	t := im.total
	return fmt.Sprintf("imported %d, existing %d, released %d, taken %d; schedules imported %d, existing %d, taken %d",
		t.Imported, t.Existing, t.Released, len(t.Taken), t.SchedulesImported, t.SchedulesExisting, len(t.SchedulesTaken))
}

var errInputLineTooLong = errors.New("line too long")

// readInputLine reads one line, without its newline, of at most
// importLineMax bytes.
func readInputLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > importLineMax+1 {
			return nil, errInputLineTooLong
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), err
	}
}
