package baseline_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/bench/baseline"
	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/loadgen"
	"github.com/toc-dev/toc/task"
)

// TestGroupLogPreallocate: a preallocated log keeps its size while the
// records fit, its records written from the start over the zeros, and
// grows past it.
func TestGroupLogPreallocate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("an old log"), 0o600); err != nil {
		t.Fatal(err)
	}
	const size = 1 << 12
	l, err := baseline.OpenGroupLog(baseline.GroupLogConfig{Path: path, Preallocate: size})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.AppendAll([]byte("one"), []byte("two")); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]byte("three")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "\x03one\x03two\x05three\x00"; len(b) != size || string(b[:len(want)]) != want {
		t.Errorf("log of %d bytes starting %q, want %d bytes starting %q", len(b), b[:min(len(b), 20)], size, want)
	}
	if err := l.Append(make([]byte, size)); err != nil { // past the end
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 14+2+size { // 14 bytes, then 4096 after its length in 2
		t.Errorf("stat: %v, %v; want %d bytes", fi.Size(), err, 14+2+size)
	}
}

// TestPushCeiling: the senders POST back to back for the duration and no
// longer, and the result gives their rate and what each POST cost.
func TestPushCeiling(t *testing.T) {
	t.Parallel()
	start := time.Now()
	r, err := baseline.PushCeiling(context.Background(), baseline.CeilingOptions{Senders: 4, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %s for a 300ms ceiling", took)
	}
	if r.System != baseline.SystemBaseline || r.Workload != baseline.WorkloadCeiling || r.Concurrency != 4 || r.N < 4 || r.Fired != r.N {
		t.Errorf("result %+v, want the POSTs of 4 senders", r)
	}
	if r.ElapsedSec < 0.3 || r.ElapsedSec > 5 {
		t.Errorf("elapsed %gs, want about the 0.3s asked for", r.ElapsedSec)
	}
	if want := float64(r.N) / r.ElapsedSec; r.DrainPerSec < 0.9*want || r.DrainPerSec > 1.1*want {
		t.Errorf("drain %g/s, want the POSTs over the elapsed time, %g/s", r.DrainPerSec, want)
	}
	if r.Cost == nil || r.Cost.Fires != r.N || r.Cost.CPUUsPerFire.Toc == nil {
		t.Fatalf("cost %+v, want the CPU per POST of %d", r.Cost, r.N)
	}
	if runtime.GOOS == "linux" && r.Cost.MachineCPUUsPerFire == nil {
		t.Error("no machine CPU per POST on Linux")
	}
	// A window that ends before any POST could be answered (as 300 ms did
	// on a starved CI machine) still measures: it lasts until one is.
	r, err = baseline.PushCeiling(context.Background(), baseline.CeilingOptions{Senders: 4, Duration: time.Nanosecond})
	if err != nil || r.N < 1 {
		t.Errorf("a window of 1ns: %v, %+v; want at least one POST answered", err, r)
	}
	if _, err := baseline.PushCeiling(context.Background(), baseline.CeilingOptions{Senders: -1}); err == nil {
		t.Error("-1 senders: no error")
	}
}

// TestClaimServerDrain: toc's pull consumers drain a burst from the pull
// baseline: each task claimed and acked once, every ack made durable
// before it is answered.
func TestClaimServerDrain(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "acks")
	var mu sync.Mutex
	var synced int64 // bytes of the log covered by a sync
	srv, err := baseline.StartClaimServer(baseline.GroupLogConfig{Path: path, Sync: func(f *os.File) error {
		fi, err := f.Stat()
		if err == nil {
			mu.Lock()
			synced = fi.Size()
			mu.Unlock()
		}
		return errors.Join(err, baseline.Fdatasync(f))
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const n = 2500
	hc := loadgen.NewHTTPClient(16)
	defer hc.CloseIdleConnections()
	c := client.New(client.Config{BaseURL: srv.URL, HTTPClient: hc})
	rec := loadgen.NewRecorder(n)
	sys, err := loadgen.NewToc(loadgen.TocConfig{Clients: []*client.Client{c}, Recorder: rec, Delivery: loadgen.DeliveryPull, Consumers: 2})
	if err != nil {
		t.Fatal(err)
	}
	r, err := loadgen.Fire(context.Background(), sys, rec, loadgen.FireOptions{N: n, Lead: 500 * time.Millisecond, Concurrency: 2, Grace: 2 * time.Second, MaxWait: 30 * time.Second})
	// Fire ends once every task is claimed; the last acks follow.
	for deadline := time.Now().Add(10 * time.Second); err == nil && srv.Leased() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if cerr := sys.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if r.Fired != n || r.Missing != 0 || r.Duplicates != 0 || r.Early != 0 || r.DrainPerSec <= 0 {
		t.Errorf("result %+v, want all %d claimed once, none early, and the drain rate", r, n)
	}
	if notes := strings.Join(append(sys.Notes(), srv.Notes()...), "; "); !strings.Contains(notes, "2500 tasks claimed, 2500 acked") || strings.Contains(notes, "error") {
		t.Errorf("notes %q, want 2500 claimed and acked, no errors", notes)
	}
	if p, l := srv.Pending(), srv.Leased(); p != 0 || l != 0 {
		t.Errorf("%d pending and %d leased at the end, want none", p, l)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// Each ack record holds 16 bytes an id, after its length.
	if fi.Size() < 16*n {
		t.Errorf("ack log of %d bytes, want the %d ids of 16 bytes", fi.Size(), n)
	}
	mu.Lock()
	defer mu.Unlock()
	if synced != fi.Size() {
		t.Errorf("the syncs covered %d bytes of the %d written", synced, fi.Size())
	}
}

// TestClaimServerClaims: a claim takes only the due tasks of its app, waits
// up to its wait for one to fall due, and an ack with a lease that is not current
// (given twice, or made up) is refused.
func TestClaimServerClaims(t *testing.T) {
	t.Parallel()
	srv, err := baseline.StartClaimServer(baseline.GroupLogConfig{Path: filepath.Join(t.TempDir(), "acks")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hc := loadgen.NewHTTPClient(4)
	defer hc.CloseIdleConnections()
	c := client.New(client.Config{BaseURL: srv.URL, HTTPClient: hc})
	ctx := context.Background()
	now := time.Now()
	past, soon, later := now.Add(-time.Second), now.Add(300*time.Millisecond), now.Add(time.Hour)
	var reqs []client.ScheduleRequest
	for i, due := range []time.Time{past, past, soon, later} {
		reqs = append(reqs, client.ScheduleRequest{App: "a", Key: string(rune('a' + i)), DueAt: &due, Target: task.Target{Pull: &task.PullTarget{}}})
	}
	reqs = append(reqs, client.ScheduleRequest{App: "b", Key: "b", DueAt: &past, Target: task.Target{Pull: &task.PullTarget{}}})
	if _, err := c.ScheduleBatchMinimal(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	got, err := c.Claim(ctx, "a", client.ClaimRequest{Max: 10})
	if err != nil || len(got) != 2 {
		t.Fatalf("claim: %d tasks, %v; want the 2 due", len(got), err)
	}
	for _, tk := range got {
		if tk.Lease == "" || tk.State != task.Delivering || tk.Attempts != 1 {
			t.Errorf("claimed %+v, want a lease, delivering, attempt 1", tk)
		}
	}
	start := time.Now()
	next, err := c.Claim(ctx, "a", client.ClaimRequest{Max: 10, Wait: task.Duration(10 * time.Second)})
	if err != nil || len(next) != 1 || next[0].Key != "c" {
		t.Fatalf("waiting claim: %v, %v; want the task due soon", next, err)
	}
	if !time.Now().After(soon) || time.Since(start) > 5*time.Second {
		t.Errorf("the waiting claim answered after %s, want once the task fell due (about 300ms)", time.Since(start))
	}
	acks := []client.AckItem{{ID: got[0].ID, Lease: got[0].Lease}, {ID: got[1].ID, Lease: "made-up"}, {ID: got[0].ID, Lease: got[0].Lease}}
	errs, err := c.AckMany(ctx, "a", acks)
	if err != nil || len(errs) != 3 {
		t.Fatalf("ack: %v, %v", errs, err)
	}
	if errs[0] != nil || errs[1] == nil || errs[2] == nil {
		t.Errorf("ack errors %v, want the first acked, the made-up lease and the second ack refused", errs)
	}
	if l := srv.Leased(); l != 2 {
		t.Errorf("%d leased, want 2 (the one with a made-up ack, and the one due soon)", l)
	}
	if p := srv.Pending(); p != 2 {
		t.Errorf("%d pending, want the one due in an hour and app b's", p)
	}
	if b, err := c.Claim(ctx, "b", client.ClaimRequest{Max: 10}); err != nil || len(b) != 1 || b[0].App != "b" {
		t.Errorf("claim of app b: %v, %v; want its task", b, err)
	}
}
