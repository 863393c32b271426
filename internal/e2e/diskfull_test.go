//go:build linux

package e2e_test

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// readyz returns /readyz's status and body.
func readyz(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDiskFull runs embedded toc on a small tmpfs and fills it: creates
// answer 507 saying the disk is full, /readyz is not ready and says why,
// reads and firing go on (the outcome is stored), and once space is freed
// creates are taken again without a restart. Then toc is started on the
// full disk: with its reserve to free it serves reads and refuses creates;
// without, it exits at once saying to free space. SIGTERM ends it at once
// throughout.
func TestDiskFull(t *testing.T) {
	ctx := ctxTimeout(t, 2*time.Minute)
	root := testsvc.Tmpfs(t, 128<<20)
	data := filepath.Join(root, "data")
	h := newHooks(t)
	c := startChild(t, data)
	cl := c.client()

	held, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "shop", Delay: task.Duration(time.Hour), Target: task.Target{Pull: &task.PullTarget{}}})
	if err != nil {
		t.Fatal(err)
	}
	fireAt := time.Now().Add(4 * time.Second)
	fired, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "shop", DueAt: &fireAt, Target: task.Target{HTTP: &task.HTTPTarget{URL: h.URL}}})
	if err != nil {
		t.Fatal(err)
	}

	filler := filepath.Join(root, "filler")
	t.Logf("filled the disk with %d bytes", testsvc.FillDisk(t, filler))
	create := func() error {
		_, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "shop", Delay: task.Duration(time.Hour), Target: task.Target{Pull: &task.PullTarget{}}})
		return err
	}
	var ce *client.Error
	testkit.WaitFor(t, 10*time.Second, "a create answered 507", func() bool {
		err := create()
		return errors.As(err, &ce) && ce.Status == http.StatusInsufficientStorage
	})
	if ce.Code != "disk_full" || !strings.Contains(ce.Message, "disk") || !strings.Contains(ce.Message, "nothing was stored") {
		t.Errorf("507's error: %+v, want code disk_full and a message saying the disk is full and nothing was stored", ce)
	}
	t.Logf("create: %v", ce)
	if st, body := readyz(t, c.url); st != http.StatusServiceUnavailable || !strings.Contains(body, "disk full") {
		t.Errorf("/readyz on a full disk: %d %s, want 503 saying the disk is full", st, body)
	} else {
		t.Logf("/readyz: %d %s", st, body)
	}
	if _, err := cl.Get(ctx, held.ID); err != nil {
		t.Errorf("get on a full disk: %v", err)
	}
	if time.Now().After(fireAt) {
		t.Log("the disk filled after the task fired: its firing on a full disk is not shown")
	}
	testkit.WaitFor(t, 15*time.Second, "the task due on a full disk delivered and recorded", func() bool {
		tk, err := cl.Get(ctx, fired.ID)
		return h.seen(fired.ID.String()) && err == nil && tk.State == task.Delivered
	})

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "creates taken again once space is freed", func() bool { return create() == nil })
	if st, body := readyz(t, c.url); st != http.StatusOK {
		t.Errorf("/readyz once space is back: %d %s", st, body)
	}
	if err, took := c.terminate(t); err != nil || took > 10*time.Second {
		t.Fatalf("toc serve after SIGTERM: %v in %s", err, took)
	}

	// A start on a full disk, the reserve there to free: reads served,
	// creates refused, not ready.
	if _, err := os.Stat(filepath.Join(data, pebblestore.ReserveName)); err != nil {
		t.Fatalf("the reserve was not written again: %v", err)
	}
	testsvc.FillDisk(t, filler)
	c = startChild(t, data)
	cl = c.client()
	if _, err := cl.Get(ctx, held.ID); err != nil {
		t.Errorf("get after a start on a full disk: %v", err)
	}
	if err := create(); !errors.As(err, &ce) || ce.Status != http.StatusInsufficientStorage {
		t.Errorf("create after a start on a full disk: %v, want 507", err)
	}
	if st, body := readyz(t, c.url); st != http.StatusServiceUnavailable {
		t.Errorf("/readyz after a start on a full disk: %d %s, want 503", st, body)
	}
	if err, took := c.terminate(t); err != nil || took > 10*time.Second {
		t.Fatalf("toc serve started on a full disk, after SIGTERM: %v in %s", err, took)
	}

	// No reserve left to free: toc exits at once, saying so.
	testsvc.FillDisk(t, filler+"2")
	start := time.Now()
	out, err := runChild(t, "serve", "--data", data, "--listen", "127.0.0.1:0")
	if err == nil || !strings.Contains(out, "disk full") || !strings.Contains(out, "free space") {
		t.Fatalf("toc serve on a full disk without a reserve: %v\n%s", err, out)
	}
	t.Logf("toc serve exited in %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
}

// TestServeIncompleteBackup: a backup's copy cut short (no MANIFEST, no
// completion marker: what `toc backup` killed early leaves) is refused by
// toc serve, which says what is missing, and its files are left as they
// were.
func TestServeIncompleteBackup(t *testing.T) {
	ctx := ctxTimeout(t, time.Minute)
	root := t.TempDir()
	c := startChild(t, filepath.Join(root, "data"))
	for i := range 50 {
		if _, _, err := c.client().Schedule(ctx, client.ScheduleRequest{App: "shop", Delay: task.Duration(time.Hour),
			Payload: []byte(`{"n":` + string(rune('0'+i%10)) + `}`), Target: task.Target{Pull: &task.PullTarget{}}}); err != nil {
			t.Fatal(err)
		}
	}
	whole := filepath.Join(root, "whole")
	if out, err := runChild(t, "backup", "--server", c.url, "--to", whole); err != nil {
		t.Fatalf("toc backup: %v\n%s", err, out)
	}
	if err, _ := c.terminate(t); err != nil {
		t.Fatal(err)
	}
	partial := filepath.Join(root, "cut.partial")
	renamed := filepath.Join(root, "cut")
	for _, dir := range []string{partial, renamed} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		es, err := os.ReadDir(whole)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if n := e.Name(); e.IsDir() || strings.HasPrefix(n, "MANIFEST-") || strings.HasPrefix(n, "marker.") || n == store.BackupManifestName {
				continue
			}
			b, err := os.ReadFile(filepath.Join(whole, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tt := range []struct {
		dir   string
		wants []string
	}{
		{partial, []string{"partial copy of a backup", store.BackupManifestName, "incomplete"}},
		{renamed, []string{"MANIFEST is missing", "incomplete"}},
	} {
		before := dirSizes(t, tt.dir)
		out, err := runChild(t, "serve", "--data", tt.dir, "--listen", "127.0.0.1:0")
		if err == nil {
			t.Fatalf("toc serve --data %s: served\n%s", tt.dir, out)
		}
		for _, w := range tt.wants {
			if !strings.Contains(out, w) {
				t.Errorf("toc serve --data %s: output lacks %q:\n%s", tt.dir, w, out)
			}
		}
		if after := dirSizes(t, tt.dir); !maps.Equal(before, after) {
			t.Errorf("%s changed:\nbefore %v\nafter  %v", tt.dir, before, after)
		}
		t.Log(strings.TrimSpace(out))
	}
}

// dirSizes returns the files of dir and their sizes.
func dirSizes(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	for _, e := range es {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = fi.Size()
	}
	return m
}

// TestDiskFullPastReserveSIGTERM: with creates and patches under way, the
// disk fills, then another program takes the reserve's room too: every
// request is answered (2xx or 507), and SIGTERM ends toc within its
// shutdown timeout even while writes wait for space.
func TestDiskFullPastReserveSIGTERM(t *testing.T) {
	ctx := ctxTimeout(t, 2*time.Minute)
	root := testsvc.Tmpfs(t, 128<<20)
	c := startChild(t, filepath.Join(root, "data"), "--shutdown-timeout", "3s")
	cl := c.client()
	var mu sync.Mutex
	answers := map[string]int{}
	record := func(err error) {
		var ce *client.Error
		key := "2xx"
		switch {
		case err == nil:
		case errors.As(err, &ce):
			key = fmt.Sprint(ce.Status)
		case strings.Contains(err.Error(), "refused"), strings.Contains(err.Error(), "reset"), strings.Contains(err.Error(), "EOF"),
			strings.Contains(err.Error(), "broken pipe"),
			// SIGTERM's shutdown closes idle keep-alive connections; a
			// request sent on one as it closed never reached toc (the
			// transport retries such a request itself when idempotent).
			strings.Contains(err.Error(), "server closed idle connection"),
			// The same, caught while the client still wrote the body: its
			// transport closed the connection on toc's close, under the
			// writer (readfrom ...: use of closed network connection).
			strings.Contains(err.Error(), "use of closed network connection"):
			key = "gone" // toc ended
		default:
			key = "no answer: " + err.Error()
		}
		mu.Lock()
		answers[key]++
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	payload := []byte(`{"pad":"` + strings.Repeat("x", 4000) + `"}`)
	for w := range 4 {
		own, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "shop", Delay: task.Duration(time.Hour), Payload: payload,
			Target: task.Target{Pull: &task.PullTarget{}}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if (w+i)%2 == 0 {
					_, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "shop", Delay: task.Duration(time.Hour), Payload: payload,
						Target: task.Target{Pull: &task.PullTarget{}}})
					record(err)
				} else { // changes of what toc holds go on in the reserve
					_, err := cl.Patch(ctx, own.ID, client.PatchRequest{Payload: payload})
					record(err)
				}
			}
		}()
	}
	testsvc.FillDisk(t, filepath.Join(root, "filler"))
	testkit.WaitFor(t, 10*time.Second, "toc finding the disk full", func() bool {
		st, _ := readyz(t, c.url)
		return st == http.StatusServiceUnavailable
	})
	testsvc.FillDisk(t, filepath.Join(root, "filler2")) // the reserve's room
	time.Sleep(2 * time.Second)                         // writes go on meanwhile; nothing is decided by it
	st, body := readyz(t, c.url)
	t.Logf("/readyz past the reserve: %d %s", st, body)
	err, took := c.terminate(t)
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("answers: %v; toc serve ended in %s: %v", answers, took.Round(time.Millisecond), err)
	if err != nil {
		t.Logf("toc serve's log:\n%s", c.stderr)
	}
	for k := range answers {
		if strings.HasPrefix(k, "no answer") {
			t.Errorf("a request got %s", k)
		}
	}
	if took > 3*time.Second+10*time.Second {
		t.Errorf("toc serve took %s to end after SIGTERM, with --shutdown-timeout 3s", took)
	}
	if answers["507"] == 0 {
		t.Errorf("no request answered 507 on the full disk: %v", answers)
	}
}
