package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

// How [Toc] has its tasks delivered.
const (
	// DeliveryPush targets a webhook receiver that Toc runs on 127.0.0.1.
	DeliveryPush = "push"
	// DeliveryPull targets pull consumers that Toc runs: each claims with a
	// long poll and acks every task; lateness is when the claim returned.
	DeliveryPull = "pull"
	// DeliveryNone targets pull with nobody claiming, and a deadline a
	// minute after the due time: for far-future tasks that must not be
	// delivered, and expire by themselves if a server outlives the run.
	DeliveryNone = "none"
)

// Defaults of TocConfig.
const (
	TocAppDefault    = "bench"
	ConsumersDefault = 4
	ClaimMaxDefault  = 1000 // the server's most
	claimWait        = 5 * time.Second
	claimLease       = time.Minute
)

// TocConfig configures a [Toc].
type TocConfig struct {
	// Clients talk to the server, one per node of a cluster; at least one
	// is required. Give them an HTTP client that keeps enough idle
	// connections (see [NewHTTPClient]). Each Schedule call goes to the
	// next node in turn, as a round-robin load balancer in front of the
	// nodes would send it; pull consumer i claims from node i mod len.
	Clients []*client.Client
	// Recorder receives the deliveries; required unless Delivery is
	// [DeliveryNone].
	Recorder *Recorder
	// Delivery is [DeliveryPush] (default), [DeliveryPull] or
	// [DeliveryNone].
	Delivery string
	// App is the app of the tasks. Default [TocAppDefault].
	App string
	// Run prefixes the key of each task ("RUN-SEQ"), so that runs against
	// one server do not collide. Default: the start time in base 36.
	Run string
	// Consumers is the number of concurrent claimers with
	// [DeliveryPull]. Default [ConsumersDefault]. Each claims up to
	// ClaimMax tasks (default [ClaimMaxDefault]).
	Consumers, ClaimMax int
	// KeepIDsEvery, when positive, keeps the id of every job whose seq is
	// a multiple of it, for [Toc.IDs].
	KeepIDsEvery int
}

// Toc is a toc server, or the nodes of one cluster, as a [System]: it
// creates each job as a task keyed RUN-SEQ, in one request or in batches,
// and checks deliveries off as they arrive at its webhook receiver or pull
// consumers.
type Toc struct {
	cfg    TocConfig
	target task.Target
	next   atomic.Uint64 // round robin over cfg.Clients

	cancel context.CancelFunc
	wg     sync.WaitGroup
	recv   *Receiver // push only

	claimErrors, ackErrors atomic.Int64

	idsMu sync.Mutex
	ids   []task.ID // see TocConfig.KeepIDsEvery
}

// IDs are the ids kept of the jobs scheduled so far (TocConfig.KeepIDsEvery).
func (t *Toc) IDs() []task.ID {
	t.idsMu.Lock()
	defer t.idsMu.Unlock()
	return slices.Clone(t.ids)
}

// keepID keeps id, the task of job seq, when TocConfig.KeepIDsEvery says.
func (t *Toc) keepID(seq int, id task.ID) {
	if k := t.cfg.KeepIDsEvery; k > 0 && seq%k == 0 {
		t.idsMu.Lock()
		t.ids = append(t.ids, id)
		t.idsMu.Unlock()
	}
}

var _ System = (*Toc)(nil)

// NewToc starts the receiving side of cfg.Delivery. Close stops it.
func NewToc(cfg TocConfig) (*Toc, error) {
	cfg.Delivery = cmp.Or(cfg.Delivery, DeliveryPush)
	cfg.App = cmp.Or(cfg.App, TocAppDefault)
	cfg.Run = cmp.Or(cfg.Run, strconv.FormatInt(time.Now().UnixMilli(), 36))
	cfg.Consumers = cmp.Or(cfg.Consumers, ConsumersDefault)
	cfg.ClaimMax = cmp.Or(cfg.ClaimMax, ClaimMaxDefault)
	if len(cfg.Clients) == 0 || slices.Contains(cfg.Clients, nil) {
		return nil, errors.New("bench: TocConfig.Clients is required and must not hold nil")
	}
	if cfg.Recorder == nil && cfg.Delivery != DeliveryNone {
		return nil, errors.New("bench: TocConfig.Recorder is required")
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Toc{cfg: cfg, cancel: cancel}
	switch cfg.Delivery {
	case DeliveryPush:
		recv, err := StartReceiver(cfg.Run, cfg.App, cfg.Recorder)
		if err != nil {
			cancel()
			return nil, err
		}
		t.recv = recv
		t.target = task.Target{HTTP: &task.HTTPTarget{URL: recv.URL}}
	case DeliveryPull:
		t.target = task.Target{Pull: &task.PullTarget{}}
		for i := range cfg.Consumers {
			c := cfg.Clients[i%len(cfg.Clients)]
			acks := make(chan []*task.Task, 1) // the consumer claims the next batch while its acker acks one
			t.wg.Go(func() { t.consume(ctx, c, acks) })
			t.wg.Go(func() { t.ack(ctx, c, acks) })
		}
	case DeliveryNone:
		t.target = task.Target{Pull: &task.PullTarget{}}
	default:
		cancel()
		return nil, fmt.Errorf("bench: TocConfig.Delivery must be %q, %q or %q, got %q", DeliveryPush, DeliveryPull, DeliveryNone, cfg.Delivery)
	}
	return t, nil
}

// Close stops the receiver or consumers and waits for them. Deliveries
// still in flight are cut off: the run is over.
func (t *Toc) Close() error {
	t.cancel()
	var err error
	if t.recv != nil {
		err = t.recv.Close()
	}
	t.wg.Wait()
	return err
}

// Notes describes errors the consumers met, if any.
func (t *Toc) Notes() []string {
	var n []string
	if c := t.claimErrors.Load(); c > 0 {
		n = append(n, fmt.Sprintf("%d claims failed", c))
	}
	if c := t.ackErrors.Load(); c > 0 {
		n = append(n, fmt.Sprintf("%d acks failed", c))
	}
	return n
}

// Schedule creates jobs as tasks: one POST /v1/tasks for a single job, else
// POST /v1/tasks:batch (up to 1000 at a time) asking for minimal answers (a
// producer that reads nothing back), at the next node in turn.
func (t *Toc) Schedule(ctx context.Context, jobs []Job) error {
	c := t.cfg.Clients[(t.next.Add(1)-1)%uint64(len(t.cfg.Clients))]
	if len(jobs) == 1 {
		tk, created, err := c.Schedule(ctx, t.request(jobs[0]))
		if err == nil && !created {
			err = fmt.Errorf("task %s already existed", t.key(jobs[0].Seq))
		}
		if err == nil {
			t.keepID(jobs[0].Seq, tk.ID)
		}
		return err
	}
	reqs := make([]client.ScheduleRequest, len(jobs))
	for i, j := range jobs {
		reqs[i] = t.request(j)
	}
	res, err := c.ScheduleBatchMinimal(ctx, reqs)
	if err != nil {
		return err
	}
	for i, r := range res {
		switch {
		case r.Err != nil:
			return fmt.Errorf("task %s: %w", t.key(jobs[i].Seq), r.Err)
		case !r.Created:
			return fmt.Errorf("task %s already existed", t.key(jobs[i].Seq))
		}
		t.keepID(jobs[i].Seq, r.Task.ID)
	}
	return nil
}

func (t *Toc) request(j Job) client.ScheduleRequest {
	due := j.DueAt
	r := client.ScheduleRequest{
		App:     t.cfg.App,
		Key:     t.key(j.Seq),
		DueAt:   &due,
		Payload: JobPayload(j.Seq),
		Target:  t.target,
	}
	if t.cfg.Delivery == DeliveryNone {
		d := due.Add(time.Minute)
		r.Deadline = &d
	}
	return r
}

func (t *Toc) key(seq int) string { return JobKey(t.cfg.Run, seq) }

func (t *Toc) seq(key string) int { return jobSeq(t.cfg.Run, key) }

// jobKey is the key of job seq of run: "RUN-SEQ".
func JobKey(run string, seq int) string { return run + "-" + strconv.Itoa(seq) }

// jobSeq reads the seq back from a key; -1 when the key is not of run.
func jobSeq(run, key string) int {
	s, ok := strings.CutPrefix(key, run+"-")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// Receiver is the webhook that push deliveries come to, toc's and the
// baselines' alike (bench/baseline), on 127.0.0.1: it records each against
// its Toc-Due-At header and answers 204.
type Receiver struct {
	run, app string
	rec      *Recorder
	URL      string // where to POST
	srv      *http.Server
	done     chan struct{} // closed when Serve has returned
}

// StartReceiver starts a receiver for the jobs of run (their keys are
// [JobKey]s) of app, recording each delivery in rec.
func StartReceiver(run, app string, rec *Recorder) (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: receiver: %w", err)
	}
	r := &Receiver{run: run, app: app, rec: rec, URL: "http://" + ln.Addr().String() + "/hook", done: make(chan struct{})}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	// Owned by close, which waits for it.
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	at := time.Now()
	due, err := time.Parse(time.RFC3339Nano, req.Header.Get("Toc-Due-At"))
	seq := jobSeq(r.run, req.Header.Get("Toc-Key"))
	if err != nil || req.Header.Get("Toc-App") != r.app {
		seq = -1
	}
	r.rec.Record(seq, due, at)
	w.WriteHeader(http.StatusNoContent)
}

// Close stops the receiver, cutting off requests in flight, and waits for
// it.
func (r *Receiver) Close() error {
	err := r.srv.Close()
	<-r.done
	return err
}

// consume claims tasks from c until ctx is done and hands each claim to
// its acker.
func (t *Toc) consume(ctx context.Context, c *client.Client, acks chan<- []*task.Task) {
	req := client.ClaimRequest{Max: t.cfg.ClaimMax, Lease: task.Duration(claimLease), Wait: task.Duration(claimWait)}
	for ctx.Err() == nil {
		got, err := c.Claim(ctx, t.cfg.App, req)
		at := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			t.claimErrors.Add(1)
			sleep(ctx, 100*time.Millisecond) // the server is struggling; don't spin
			continue
		}
		for _, tk := range got {
			t.cfg.Recorder.Record(t.seq(tk.Key), tk.DueAt, at)
		}
		if len(got) == 0 {
			continue
		}
		select {
		case acks <- got:
		case <-ctx.Done():
			return
		}
	}
}

// ack acks each claim at c, in one request, until ctx is done.
func (t *Toc) ack(ctx context.Context, c *client.Client, acks <-chan []*task.Task) {
	var items []client.AckItem
	for {
		select {
		case <-ctx.Done():
			return
		case got := <-acks:
			items = items[:0]
			for _, tk := range got {
				items = append(items, client.AckItem{ID: tk.ID, Lease: tk.Lease})
			}
			errs, err := c.AckMany(ctx, t.cfg.App, items)
			switch {
			case err != nil && ctx.Err() == nil:
				t.ackErrors.Add(int64(len(items)))
			case err == nil:
				for _, err := range errs {
					if err != nil {
						t.ackErrors.Add(1)
					}
				}
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}

// JobPayload is the payload of job seq: {"seq":SEQ}.
func JobPayload(seq int) []byte {
	return append(strconv.AppendInt([]byte(`{"seq":`), int64(seq), 10), '}')
}

// NewHTTPClient returns an HTTP client for a benchmark that keeps up to
// conns idle connections to the server, so concurrent clients reuse them
// instead of opening (and leaving in TIME_WAIT) one per request.
func NewHTTPClient(conns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = conns
	tr.MaxIdleConnsPerHost = conns
	return &http.Client{Transport: tr}
}
