package baseline

import (
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/task"
)

// VariantClaimServer is the Variant of the pull baseline's [loadgen.Result].
const VariantClaimServer = "pull, in-memory claims + ack fdatasync, group commit"

// ClaimServer is the pull workload's baseline server (issue #25): what toc
// must at least do to hand due pull tasks to consumers. It holds the tasks
// created at it in memory (a heap by due time; the creates are not made
// durable), answers claims in toc's claim form (POST
// /v1/apps/{app}/claim: up to max due tasks, each with a lease; it waits up
// to the claim's wait when none is due) and batch acks in toc's form (POST
// /v1/apps/{app}/tasks:ack) once the acked ids are appended to a
// [GroupLog] synced by fdatasync (group commit). POST /v1/tasks:batch
// creates (its answer is the minimal one); GET /readyz answers 204.
type ClaimServer struct {
	// URL is where it listens: http://127.0.0.1:PORT.
	URL  string
	log  *GroupLog
	srv  *http.Server
	done chan struct{} // closed when Serve has returned

	ids      task.IDGenerator
	leaseSeq atomic.Uint64
	claimed  atomic.Int64
	acked    atomic.Int64

	mu struct {
		sync.Mutex
		due    map[string]*dueHeap // by app
		leased map[task.ID]string  // lease of each task claimed and not acked
		wake   chan struct{}       // closed and replaced when tasks are added
	}
}

// StartClaimServer opens the ack log (cfg, synced by [Fdatasync] unless
// cfg.Sync says otherwise) and serves on a free loopback port. Close stops
// it.
func StartClaimServer(cfg GroupLogConfig) (*ClaimServer, error) {
	if cfg.Sync == nil {
		cfg.Sync = Fdatasync
	}
	l, err := OpenGroupLog(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("bench: claim server: %w", err), l.Close())
	}
	s := &ClaimServer{URL: "http://" + ln.Addr().String(), log: l, done: make(chan struct{})}
	s.mu.due = map[string]*dueHeap{}
	s.mu.leased = map[task.ID]string{}
	s.mu.wake = make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /v1/tasks:batch", s.create)
	mux.HandleFunc("POST /v1/apps/{app}/claim", s.claim)
	mux.HandleFunc("POST /v1/apps/{app}/tasks:ack", s.ack)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	// Owned by Close, which waits for it.
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Pending is the number of tasks not yet claimed; Leased those claimed and
// not acked durably.
func (s *ClaimServer) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, h := range s.mu.due {
		n += len(*h)
	}
	return n
}

func (s *ClaimServer) Leased() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.leased)
}

// Notes says what the server did.
func (s *ClaimServer) Notes() []string {
	return []string{fmt.Sprintf("baseline: %d tasks claimed, %d acked, made durable by %d fdatasyncs", s.claimed.Load(), s.acked.Load(), s.log.Syncs())}
}

// Close stops serving, cutting off requests in flight, and closes the log.
func (s *ClaimServer) Close() error {
	err := s.srv.Close()
	<-s.done
	return errors.Join(err, s.log.Close())
}

func (s *ClaimServer) create(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var in struct {
		Tasks []client.ScheduleRequest `json:"tasks"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	now := time.Now()
	ts := make([]*task.Task, len(in.Tasks))
	for i, c := range in.Tasks {
		if c.App == "" || c.DueAt == nil {
			http.Error(w, fmt.Sprintf("tasks.%d: app and due_at are required", i), http.StatusBadRequest)
			return
		}
		ts[i] = &task.Task{ID: s.ids.New(now, 0), App: c.App, Key: c.Key, State: task.Scheduled, DueAt: *c.DueAt, Payload: c.Payload, Target: c.Target, CreatedAt: now}
	}
	out := make([]byte, 0, 16+48*len(ts))
	out = append(out, `{"results":[`...)
	for i, t := range ts {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(append(append(out, `{"task":{"id":"`...), t.ID.String()...), `"},"created":true}`...)
	}
	out = append(out, "]}"...)
	s.mu.Lock()
	for _, t := range ts {
		h := s.mu.due[t.App]
		if h == nil {
			h = new(dueHeap)
			s.mu.due[t.App] = h
		}
		heap.Push(h, t)
	}
	close(s.mu.wake)
	s.mu.wake = make(chan struct{})
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Preference-Applied", "return=minimal")
	_, _ = w.Write(out)
}

// claimWaitMax bounds how long a claim waits.
const claimWaitMax = time.Minute

func (s *ClaimServer) claim(w http.ResponseWriter, r *http.Request) {
	app := r.PathValue("app")
	req := client.ClaimRequest{Max: 10, Lease: task.Duration(30 * time.Second)}
	if r.ContentLength != 0 {
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	if req.Max < 1 || req.Max > 1000 {
		http.Error(w, "max: must be between 1 and 1000", http.StatusBadRequest)
		return
	}
	deadline := time.Now().Add(min(req.Wait.Std(), claimWaitMax))
	var got []*task.Task
	for {
		now := time.Now()
		s.mu.Lock()
		h := s.mu.due[app]
		if h == nil {
			h = new(dueHeap)
			s.mu.due[app] = h
		}
		for len(got) < req.Max && len(*h) > 0 && !(*h)[0].DueAt.After(now) {
			t := heap.Pop(h).(*task.Task)
			t.State, t.Attempts = task.Delivering, t.Attempts+1
			t.Lease = strconv.FormatUint(s.leaseSeq.Add(1), 36)
			exp := now.Add(req.Lease.Std())
			t.LeaseExpiresAt = &exp
			s.mu.leased[t.ID] = t.Lease
			got = append(got, t)
		}
		next := time.Time{}
		if len(*h) > 0 {
			next = (*h)[0].DueAt
		}
		wake := s.mu.wake
		s.mu.Unlock()
		if len(got) > 0 || !now.Before(deadline) {
			break
		}
		wait := time.Until(deadline)
		if !next.IsZero() {
			wait = min(wait, time.Until(next))
		}
		tm := time.NewTimer(max(wait, 0))
		select {
		case <-wake:
		case <-tm.C:
		case <-r.Context().Done():
			tm.Stop()
			return
		}
		tm.Stop()
	}
	s.claimed.Add(int64(len(got)))
	b := make([]byte, 0, 16+400*len(got))
	b = append(b, `{"tasks":[`...)
	for i, t := range got {
		if i > 0 {
			b = append(b, ',')
		}
		tb, err := t.MarshalJSON()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		b = append(b, tb...)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, "]}"...))
}

func (s *ClaimServer) ack(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var in struct {
		Acks []client.AckItem `json:"acks"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The record is the ids acked, 16 bytes each; an ack whose lease is
	// not current is answered 409 and not written.
	rec := make([]byte, 0, 16*len(in.Acks))
	ok2 := make([]bool, len(in.Acks))
	// A task being acked keeps an empty lease, which no ack matches, until
	// its ack is durable.
	s.mu.Lock()
	for i, a := range in.Acks {
		if l, found := s.mu.leased[a.ID]; found && l != "" && l == a.Lease {
			s.mu.leased[a.ID] = ""
			rec = append(rec, a.ID[:]...)
			ok2[i] = true
		}
	}
	s.mu.Unlock()
	err := s.log.Append(rec)
	s.mu.Lock()
	for i, a := range in.Acks {
		if !ok2[i] {
			continue
		}
		if err != nil {
			s.mu.leased[a.ID] = a.Lease // not acked: it may be again
		} else {
			delete(s.mu.leased, a.ID)
			s.acked.Add(1)
		}
	}
	s.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out := make([]byte, 0, 16+4*len(in.Acks))
	out = append(out, `{"results":[`...)
	for i, good := range ok2 {
		if i > 0 {
			out = append(out, ',')
		}
		if good {
			out = append(out, "{}"...)
		} else {
			out = append(out, `{"error":{"code":"conflict","message":"the lease is not current"}}`...)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(out, "]}"...))
}

// dueHeap is a min-heap of tasks by due time.
type dueHeap []*task.Task

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].DueAt.Before(h[j].DueAt) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(*task.Task)) }
func (h *dueHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
