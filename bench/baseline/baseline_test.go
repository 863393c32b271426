package baseline_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toc-dev/toc/bench/baseline"
	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/loadgen"
)

// TestTimersFire: the fire baseline delivers every job once, never before
// its due time, to its receiver.
func TestTimersFire(t *testing.T) {
	t.Parallel()
	const n = 300
	rec := loadgen.NewRecorder(n)
	sys, err := baseline.NewTimers(baseline.TimersConfig{Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	res, err := loadgen.Fire(context.Background(), sys, rec, loadgen.FireOptions{
		N: n, Spread: 300 * time.Millisecond, Lead: 200 * time.Millisecond, Batch: 50, Concurrency: 4, Grace: 5 * time.Second,
	})
	if cerr := sys.Close(); cerr != nil {
		t.Errorf("Close: %v", cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Fired != n || res.Missing != 0 || res.Duplicates != 0 || res.Early != 0 || res.LatenessMs.Min < 0 {
		t.Errorf("result %+v, want all %d fired once, none early", res, n)
	}
	if notes := sys.Notes(); len(notes) != 0 {
		t.Errorf("notes %q, want none (no POST failed)", notes)
	}
	if err := sys.Schedule(context.Background(), []loadgen.Job{{DueAt: time.Now()}}); err == nil {
		t.Error("Schedule after Close: no error")
	}
}

// TestTimersClose: timers that have not fired are stopped, and Close does
// not wait for them.
func TestTimersClose(t *testing.T) {
	t.Parallel()
	rec := loadgen.NewRecorder(2)
	sys, err := baseline.NewTimers(baseline.TimersConfig{Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Schedule(context.Background(), []loadgen.Job{{Seq: 0, DueAt: time.Now().Add(time.Hour)}, {Seq: 1, DueAt: time.Now().Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := sys.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second || rec.Delivered() != 0 {
		t.Errorf("Close took %s, %d delivered; want at once, none", took, rec.Delivered())
	}
}

// TestLogHandlerGroupCommit: requests that come while an fsync runs wait
// for the next one, which serves them all; each is answered only after
// its fsync, with its body echoed.
func TestLogHandlerGroupCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var syncs atomic.Int64
		release := make(chan struct{})
		path := filepath.Join(t.TempDir(), "log")
		log, err := baseline.OpenGroupLog(baseline.GroupLogConfig{Path: path, Sync: func(f *os.File) error {
			if syncs.Add(1) == 1 {
				<-release // the first fsync lasts until the others have come
			}
			return f.Sync()
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer log.Close()
		h := baseline.LogHandler(log)
		answers := make([]*httptest.ResponseRecorder, 9)
		bodies := make([]string, 9)
		var wg sync.WaitGroup
		var answered atomic.Int64
		serve := func(i int) {
			path := "/v1/tasks"
			bodies[i] = `{"app":"a","key":"k` + string(rune('0'+i)) + `","due_at":"2026-01-01T00:00:00Z"}`
			if i%3 == 2 {
				path = "/v1/tasks:batch"
				bodies[i] = `{"tasks":[{"app":"a","key":"x","due_at":"2026-01-01T00:00:00Z"},{"app":"a","key":"y","due_at":"2026-01-01T00:00:00Z"}]}`
			}
			answers[i] = httptest.NewRecorder()
			req := httptest.NewRequest("POST", path, strings.NewReader(bodies[i]))
			wg.Go(func() {
				h.ServeHTTP(answers[i], req)
				answered.Add(1)
			})
		}
		serve(0)
		synctest.Wait() // request 0 is in the first fsync
		for i := 1; i < 9; i++ {
			serve(i)
		}
		synctest.Wait() // the other eight wait for the next
		if n := answered.Load(); n != 0 {
			t.Errorf("%d requests answered before their fsync", n)
		}
		close(release)
		wg.Wait()
		if n := syncs.Load(); n != 2 {
			t.Errorf("%d fsyncs for 9 requests, want 2: the first alone, then the eight that came during it", n)
		}
		if log.Syncs() != 2 || log.Appended() != 9 {
			t.Errorf("Syncs %d, Appended %d; want 2, 9", log.Syncs(), log.Appended())
		}
		for i, a := range answers {
			want, code := bodies[i], http.StatusCreated
			if i%3 == 2 {
				want, code = `{"results":[{"task":{"app":"a","key":"x","due_at":"2026-01-01T00:00:00Z"},"created":true},{"task":{"app":"a","key":"y","due_at":"2026-01-01T00:00:00Z"},"created":true}]}`, http.StatusOK
			}
			if a.Code != code || a.Body.String() != want {
				t.Errorf("request %d: %d %s, want %d %s", i, a.Code, a.Body, code, want)
			}
		}
		if err := log.Close(); err != nil {
			t.Fatal(err)
		}
		// The log holds a record per task (the six single ones and two of
		// each batch), each after its length.
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var recs int
		for r := bytes.NewReader(b); r.Len() > 0; recs++ {
			n, err := binary.ReadUvarint(r)
			if err == nil {
				_, err = io.CopyN(io.Discard, r, int64(n))
			}
			if err != nil {
				t.Fatalf("record %d: %v", recs, err)
			}
		}
		if recs != 12 {
			t.Errorf("%d records in the log, want 12: one per task", recs)
		}
		if err := log.Append([]byte("late")); !errors.Is(err, baseline.ErrLogClosed) {
			t.Errorf("Append after Close: %v, want ErrLogClosed", err)
		}
	})
}

// TestLogHandlerRefuses: a batch that is not JSON, or a task without its
// app or due time, is refused before it is logged; a failed sync fails the
// request.
func TestLogHandlerRefuses(t *testing.T) {
	t.Parallel()
	log, err := baseline.OpenGroupLog(baseline.GroupLogConfig{Path: filepath.Join(t.TempDir(), "log"), Sync: func(*os.File) error { return errors.New("disk on fire") }})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	h := baseline.LogHandler(log)
	for _, tc := range []struct {
		path, body string
		code       int
	}{
		{"/v1/tasks:batch", `{"tasks":[`, http.StatusBadRequest},
		{"/v1/tasks", `{}`, http.StatusBadRequest},
		{"/v1/tasks:batch", `{"tasks":[{"app":"a","due_at":"2026-01-01T00:00:00Z"},{"app":"a"}]}`, http.StatusBadRequest},
		{"/v1/tasks", `{"app":"a","due_at":"2026-01-01T00:00:00Z"}`, http.StatusInternalServerError},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", tc.path, strings.NewReader(tc.body)))
		if w.Code != tc.code {
			t.Errorf("POST %s %s: %d, want %d", tc.path, tc.body, w.Code, tc.code)
		}
	}
	if log.Appended() != 0 {
		t.Errorf("Appended %d, want 0", log.Appended())
	}
}

// TestLogServer: toc's client schedules on the schedule baseline, one task
// per request and in batches, as on toc.
func TestLogServer(t *testing.T) {
	t.Parallel()
	srv, err := baseline.StartLogServer(baseline.GroupLogConfig{Path: filepath.Join(t.TempDir(), "log")})
	if err != nil {
		t.Fatal(err)
	}
	hc := loadgen.NewHTTPClient(8)
	c := client.New(client.Config{BaseURL: srv.URL, HTTPClient: hc})
	if err := c.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	sys, err := loadgen.NewToc(loadgen.TocConfig{Clients: []*client.Client{c}, Recorder: loadgen.NewRecorder(1)})
	if err != nil {
		t.Fatal(err)
	}
	single, err := loadgen.Schedule(context.Background(), sys, nil, loadgen.ScheduleOptions{N: 200, Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := loadgen.Schedule(context.Background(), sys, nil, loadgen.ScheduleOptions{N: 2000, Batch: 500, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Close(); err != nil {
		t.Error(err)
	}
	hc.CloseIdleConnections()
	notes := srv.Notes()
	if err := srv.Close(); err != nil {
		t.Error(err)
	}
	if single.SchedulePerSec <= 0 || batch.SchedulePerSec <= 0 {
		t.Errorf("rates %g and %g, want > 0", single.SchedulePerSec, batch.SchedulePerSec)
	}
	// 200 single requests and 4 batches.
	if len(notes) != 1 || !strings.HasPrefix(notes[0], "baseline: 204 requests made durable by ") {
		t.Errorf("notes %q, want 204 requests", notes)
	}
}
