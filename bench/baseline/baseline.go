// Package baseline holds the workloads of toc's benchmark suite that run no
// toc (issues #13 and #25): the physical limit of the machine, measured in
// the same run as toc's figures and set beside them as ratios. [PushCeiling]
// POSTs back to back; [Timers] fires jobs from Go runtime timers;
// [LogServer] accepts create requests by appending them to a log with group
// commit; [ClaimServer] answers pull claims from memory and makes acks
// durable with group commit. Each drives, or is driven by, the load
// generator of `toc bench` (internal/loadgen), so that its figures are
// toc's in kind. The bench module's command runs them: "bash bench/run.sh
// baseline".
package baseline

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/loadgen"
	"github.com/toc-dev/toc/internal/sink/httpsink"
	"github.com/toc-dev/toc/task"
)

// The baselines give the physical limit of the machine in the same run as
// toc's figures (issue #13): the same workload with no toc. [Timers] fires
// jobs from Go runtime timers; [LogServer] accepts create requests by
// appending them to a log with group commit.
const (
	// SystemBaseline is the System of a baseline's [loadgen.Result].
	SystemBaseline = "baseline"
	// VariantTimers and VariantGroupLog are the Variants of the fire and
	// the schedule baseline.
	VariantTimers   = "timers + HTTP push"
	VariantGroupLog = "HTTP + log fsync, group commit"

	// TimersMaxInFlight bounds the POSTs of [Timers] under way at once, as
	// toc bounds an app's pushes (half of its --max-in-flight default of
	// 1024): a burst of timers must not open a connection per job.
	TimersMaxInFlight = 512
)

// TimersConfig configures [NewTimers].
type TimersConfig struct {
	// Recorder receives the deliveries; required.
	Recorder *loadgen.Recorder
	// App and Run are as in [TocConfig]: the Toc-App header and the
	// RUN-SEQ keys. Defaults [loadgen.TocAppDefault] and the start time in base 36.
	App, Run string
}

// Timers is the fire workload's baseline, as a [loadgen.System] with no toc: each
// job is a Go runtime timer (time.AfterFunc) that at the job's due time
// POSTs what toc's webhook sink would send for it (httpsink itself, with
// the same payload and headers and a transport configured as toc's) to a
// receiver like [loadgen.Toc]'s, which measures lateness the same way, at most
// [TimersMaxInFlight] at once. A failed POST is not retried: its job is
// missing.
type Timers struct {
	recv   *loadgen.Receiver
	hc     *http.Client
	sink   *httpsink.Sink
	app    string
	run    string
	target task.Target
	ids    task.IDGenerator

	ctx    context.Context // cancelled by Close, to cut off deliveries
	cancel context.CancelFunc
	// wg counts the timers armed and not stopped, until their delivery
	// returns.
	wg     sync.WaitGroup
	failed atomic.Int64
	// slots holds a token per POST under way, TimersMaxInFlight at most.
	slots chan struct{}

	mu struct {
		sync.Mutex
		timers []*time.Timer
		closed bool
	}
}

var _ loadgen.System = (*Timers)(nil)

// NewTimers starts the receiver. Close stops it and the timers.
func NewTimers(cfg TimersConfig) (*Timers, error) {
	if cfg.Recorder == nil {
		return nil, errors.New("bench: TimersConfig.Recorder is required")
	}
	cfg.App = cmp.Or(cfg.App, loadgen.TocAppDefault)
	cfg.Run = cmp.Or(cfg.Run, strconv.FormatInt(time.Now().UnixMilli(), 36))
	recv, err := loadgen.StartReceiver(cfg.Run, cfg.App, cfg.Recorder)
	if err != nil {
		return nil, err
	}
	// The transport of httpsink's default client, kept here to close its
	// idle connections at the end.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = httpsink.MaxIdleConnsPerHostDefault
	tr.MaxIdleConns = 4 * httpsink.MaxIdleConnsPerHostDefault
	hc := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	ctx, cancel := context.WithCancel(context.Background())
	return &Timers{
		recv: recv, hc: hc, sink: httpsink.New(httpsink.Config{Client: hc}),
		app: cfg.App, run: cfg.Run, target: task.Target{HTTP: &task.HTTPTarget{URL: recv.URL}},
		ctx: ctx, cancel: cancel, slots: make(chan struct{}, TimersMaxInFlight),
	}, nil
}

// Schedule arms a timer for each job.
func (t *Timers) Schedule(ctx context.Context, jobs []loadgen.Job) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		return errors.New("bench: timers closed")
	}
	now := time.Now()
	for _, j := range jobs {
		tk := &task.Task{
			ID: t.ids.New(now, 0), App: t.app, Key: loadgen.JobKey(t.run, j.Seq), State: task.Delivering,
			Attempts: 1, DueAt: j.DueAt, Payload: loadgen.JobPayload(j.Seq), Target: t.target,
		}
		t.wg.Add(1)
		t.mu.timers = append(t.mu.timers, time.AfterFunc(time.Until(j.DueAt), func() {
			defer t.wg.Done()
			select {
			case t.slots <- struct{}{}:
			case <-t.ctx.Done():
				return
			}
			defer func() { <-t.slots }()
			if err := t.sink.Deliver(t.ctx, tk); err != nil && t.ctx.Err() == nil {
				t.failed.Add(1)
			}
		}))
	}
	return nil
}

// Notes says how many POSTs failed, if any.
func (t *Timers) Notes() []string {
	if n := t.failed.Load(); n > 0 {
		return []string{fmt.Sprintf("baseline: %d POSTs failed (not retried)", n)}
	}
	return nil
}

// Close stops the timers that have not fired, cuts off the deliveries in
// flight and waits for them, and stops the receiver.
func (t *Timers) Close() error {
	t.mu.Lock()
	timers := t.mu.timers
	t.mu.timers, t.mu.closed = nil, true
	t.mu.Unlock()
	for _, tm := range timers {
		if tm.Stop() {
			t.wg.Done() // it will not run
		}
	}
	t.cancel()
	t.wg.Wait()
	t.hc.CloseIdleConnections()
	return t.recv.Close()
}

// ErrLogClosed is returned by [GroupLog.Append] after Close.
var ErrLogClosed = errors.New("bench: log closed")

// GroupLogConfig configures [OpenGroupLog].
type GroupLogConfig struct {
	// Path is the log file: created, or appended to. Required.
	Path string
	// Sync makes what was written to the file durable. Default
	// [Fdatasync].
	Sync func(*os.File) error
	// Preallocate, when positive, is the size the file is written with
	// zeros and synced to when it is opened, before any record: the records
	// then overwrite it from the start, so that a sync of records that fit
	// in it writes data only, not the file's size (as a database recycles
	// its write-ahead log files). Past it the file grows. The file is
	// truncated first: a preallocated log is a new one.
	Preallocate int64
}

// PreallocateDefault is the Preallocate of the baselines' logs: room for
// the records of a suite's runs.
const PreallocateDefault = 64 << 20

// GroupLog is an append-only log whose appends share syncs (group
// commit; preallocated, see [GroupLogConfig.Preallocate]): an append that comes while no write is in flight is written and
// synced at once; those that come while one is in flight gather, and the
// next write and sync serves them all. Each record is its length (a
// uvarint) and its bytes.
type GroupLog struct {
	f        *os.File
	off      int64 // where the next records are written
	sync     func(*os.File) error
	notify   chan struct{} // capacity 1: records are waiting
	quit     chan struct{} // closed by Close
	done     chan struct{} // closed when run has returned
	syncs    atomic.Int64
	appended atomic.Int64

	mu struct {
		sync.Mutex
		buf     []byte       // records not yet written
		waiters []chan error // their appends, each answered once synced
		closed  bool
	}
}

// OpenGroupLog opens the log and starts its writer. Close stops it.
func OpenGroupLog(cfg GroupLogConfig) (*GroupLog, error) {
	if cfg.Path == "" {
		return nil, errors.New("bench: GroupLogConfig.Path is required")
	}
	flags := os.O_WRONLY | os.O_CREATE
	if cfg.Preallocate > 0 {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(cfg.Path, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var off int64 // records go after what the file holds, or over the zeros
	if cfg.Preallocate > 0 {
		err = preallocate(f, cfg.Preallocate)
	} else {
		off, err = f.Seek(0, io.SeekEnd)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: open %s: %w", cfg.Path, err)
	}
	if cfg.Sync == nil {
		cfg.Sync = Fdatasync
	}
	l := &GroupLog{
		f: f, off: off, sync: cfg.Sync,
		notify: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
	}
	go l.run() // owned by Close, which waits for done
	return l, nil
}

// preallocate writes size zero bytes to f from its start and syncs them.
func preallocate(f *os.File, size int64) error {
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), size-off)], off); err != nil {
			return err
		}
	}
	return f.Sync()
}

// Append writes rec to the log and returns once it is synced.
func (l *GroupLog) Append(rec []byte) error { return l.AppendAll(rec) }

// AppendAll writes recs to the log, each a record, and returns once they
// are synced.
func (l *GroupLog) AppendAll(recs ...[]byte) error {
	done := make(chan error, 1)
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrLogClosed
	}
	for _, rec := range recs {
		l.mu.buf = binary.AppendUvarint(l.mu.buf, uint64(len(rec)))
		l.mu.buf = append(l.mu.buf, rec...)
	}
	l.mu.waiters = append(l.mu.waiters, done)
	l.mu.Unlock()
	select {
	case l.notify <- struct{}{}:
	default: // the writer is already told
	}
	return <-done
}

// Syncs is the number of syncs so far; Appended the records synced.
func (l *GroupLog) Syncs() int64    { return l.syncs.Load() }
func (l *GroupLog) Appended() int64 { return l.appended.Load() }

// run writes and syncs what has gathered, a group at a time, until Close;
// then what is left.
func (l *GroupLog) run() {
	defer close(l.done)
	var spare []byte
	for {
		select {
		case <-l.notify:
			spare = l.flush(spare)
		case <-l.quit:
			l.flush(spare)
			return
		}
	}
}

// flush writes and syncs the records waiting, answers their appends, and
// returns the buffer they were in for the next group.
func (l *GroupLog) flush(spare []byte) []byte {
	l.mu.Lock()
	buf, waiters := l.mu.buf, l.mu.waiters
	l.mu.buf, l.mu.waiters = spare[:0], nil
	l.mu.Unlock()
	if len(waiters) == 0 {
		return buf
	}
	_, err := l.f.WriteAt(buf, l.off)
	l.off += int64(len(buf))
	if err == nil {
		err = l.sync(l.f)
		l.syncs.Add(1)
	}
	if err == nil {
		l.appended.Add(int64(len(waiters)))
	}
	for _, w := range waiters {
		w <- err
	}
	return buf
}

// Close syncs the records waiting, stops the writer and closes the file.
// Appends after it fail with [ErrLogClosed].
func (l *GroupLog) Close() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return nil
	}
	l.mu.closed = true
	l.mu.Unlock()
	close(l.quit)
	<-l.done
	return l.f.Close()
}

// maxLogBody bounds a request body the log handler reads.
const maxLogBody = 32 << 20

// LogHandler is the schedule workload's baseline server: it answers toc's
// create requests as a server that does nothing but decode them and make
// them durable (issue #25). Each task is decoded into toc's create request
// (app and due_at required) and its JSON appended to l as one record; the
// request is answered once synced: POST /v1/tasks with 201 and the request
// echoed as the task, POST /v1/tasks:batch with 200 and each item echoed as
// a created task (a new id alone when the request prefers return=minimal). GET /readyz answers 204.
func LogHandler(l *GroupLog) http.Handler {
	var ids task.IDGenerator
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /v1/tasks", func(w http.ResponseWriter, r *http.Request) {
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		if err := decodeCreate(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !appendLog(w, l, body) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	})
	mux.HandleFunc("POST /v1/tasks:batch", func(w http.ResponseWriter, r *http.Request) {
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		var in struct {
			Tasks []json.RawMessage `json:"tasks"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		recs := make([][]byte, len(in.Tasks))
		for i, t := range in.Tasks {
			if err := decodeCreate(t); err != nil {
				http.Error(w, fmt.Sprintf("tasks.%d: %v", i, err), http.StatusBadRequest)
				return
			}
			recs[i] = t
		}
		if err := l.AppendAll(recs...); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		minimal := strings.Contains(r.Header.Get("Prefer"), "return=minimal")
		n := len(body)
		if minimal {
			n = 0
		}
		out := make([]byte, 0, n+40*len(in.Tasks)+16)
		out = append(out, `{"results":[`...)
		for i, t := range in.Tasks {
			if i > 0 {
				out = append(out, ',')
			}
			if minimal {
				out = append(append(append(out, `{"task":{"id":"`...), ids.New(time.Now(), 0).String()...), `"},"created":true}`...)
				continue
			}
			out = append(out, `{"task":`...)
			out = append(out, t...)
			out = append(out, `,"created":true}`...)
		}
		out = append(out, "]}"...)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(out)
	})
	return mux
}

// decodeCreate decodes one create request as toc does, requiring its app
// and due time.
func decodeCreate(b []byte) error {
	var c client.ScheduleRequest
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	if c.App == "" || c.DueAt == nil {
		return errors.New("app and due_at are required")
	}
	return nil
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxLogBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return body, true
}

func appendLog(w http.ResponseWriter, l *GroupLog, body []byte) bool {
	if err := l.Append(body); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return false
	}
	return true
}

// LogServer serves [LogHandler] over a [GroupLog] on 127.0.0.1.
type LogServer struct {
	// URL is where it listens: http://127.0.0.1:PORT.
	URL  string
	log  *GroupLog
	srv  *http.Server
	done chan struct{} // closed when Serve has returned
}

// StartLogServer opens the log at path (fsynced by its Sync) and serves it
// on a free loopback port. Close stops it.
func StartLogServer(cfg GroupLogConfig) (*LogServer, error) {
	l, err := OpenGroupLog(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("bench: log server: %w", err), l.Close())
	}
	s := &LogServer{URL: "http://" + ln.Addr().String(), log: l, done: make(chan struct{})}
	s.srv = &http.Server{Handler: LogHandler(l), ReadHeaderTimeout: 10 * time.Second}
	// Owned by Close, which waits for it.
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Notes says how many requests the fsyncs served.
func (s *LogServer) Notes() []string {
	return []string{fmt.Sprintf("baseline: %d requests made durable by %d fdatasyncs", s.log.Appended(), s.log.Syncs())}
}

// Close stops serving, cutting off requests in flight, and closes the log.
func (s *LogServer) Close() error {
	err := s.srv.Close()
	<-s.done
	return errors.Join(err, s.log.Close())
}
