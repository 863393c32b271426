//go:build linux

package pebblestore_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// TestDiskFull fills the tmpfs a store lives on: new tasks are refused with
// store.ErrDiskFull and Health says why, while reads and the writes that
// finish tasks go on (in the reserve the store freed); once space is freed
// the store takes new tasks again by itself.
func TestDiskFull(t *testing.T) {
	root := testsvc.Tmpfs(t, 96<<20)
	dir := filepath.Join(root, "db")
	s, err := pebblestore.Open(pebblestore.Options{Dir: dir, Reserve: 8 << 20, DiskCheck: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if fi, err := os.Stat(filepath.Join(dir, pebblestore.ReserveName)); err != nil {
		t.Fatalf("no reserve: %v", err)
	} else {
		t.Logf("reserve %s: %d bytes", fi.Name(), fi.Size())
	}
	ctx := context.Background()
	gen := new(task.IDGenerator)
	now := time.Now()
	mk := func(n int) []*task.Task {
		ts := make([]*task.Task, n)
		for i := range ts {
			ts[i] = countsTask(gen, now, "shop", "", task.Scheduled)
		}
		return ts
	}
	held := mk(20)
	if _, err := s.Create(ctx, held); err != nil {
		t.Fatal(err)
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health before the disk fills: %v", err)
	}

	filler := filepath.Join(root, "filler")
	t.Logf("filled the disk with %d bytes", testsvc.FillDisk(t, filler))
	var createErr error
	testkit.WaitFor(t, 5*time.Second, "a create refused", func() bool {
		_, createErr = s.Create(ctx, mk(1))
		return createErr != nil
	})
	if !errors.Is(createErr, store.ErrDiskFull) {
		t.Fatalf("Create on a full disk: %v, want store.ErrDiskFull", createErr)
	}
	if err := s.Health(); !errors.Is(err, store.ErrDiskFull) {
		t.Errorf("Health on a full disk: %v, want store.ErrDiskFull", err)
	} else {
		t.Logf("Health: %v", err)
	}
	if !s.DiskFull() {
		t.Error("DiskFull() = false on a full disk")
	}
	// Reads go on, and so do the writes that finish what the store holds.
	if _, err := s.Get(ctx, held[0].ID); err != nil {
		t.Errorf("Get on a full disk: %v", err)
	}
	ids := make([]task.ID, len(held))
	for i, h := range held {
		ids[i] = h.ID
	}
	for round := range 50 {
		_, errs := s.UpdateMany(ctx, ids, nil, func(ts []*task.Task) []error {
			for _, tk := range ts {
				tk.Attempts++
				tk.LastError = strings.Repeat("x", 1000) // outcomes take room
			}
			return make([]error, len(ts))
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("outcome write %d on a full disk: %v", round, err)
		}
	}
	if _, err := s.Update(ctx, held[0].ID, nil, func(tk *task.Task) error { tk.State = task.Delivered; return nil }); err != nil {
		t.Errorf("Update on a full disk: %v", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "new tasks taken again", func() bool {
		_, err := s.Create(ctx, mk(1))
		return err == nil
	})
	if err := s.Health(); err != nil {
		t.Errorf("Health once space is back: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, pebblestore.ReserveName)); err != nil {
		t.Errorf("reserve not written again: %v", err)
	}
	got, err := s.Get(ctx, held[1].ID)
	if err != nil || got.Attempts != 50 {
		t.Errorf("Get after the full disk: %v, %v; want 50 attempts", got, err)
	}
}

// walFaults opens a store on a MemFS whose usage the test sets, with log
// writes failing with *fail while it is set.
func walFaults(t *testing.T, fail *atomic.Pointer[error]) (*pebblestore.Store, *vfs.MemFS) {
	t.Helper()
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if e := fail.Load(); e != nil && op.Kind == errorfs.OpFileWrite && strings.HasSuffix(op.Path, ".log") {
			return &os.PathError{Op: "write", Path: op.Path, Err: *e}
		}
		return nil
	})
	mem := vfs.NewMem()
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30, UsedBytes: 1 << 30})
	s, err := pebblestore.Open(pebblestore.Options{Dir: "db", FS: errorfs.Wrap(mem, inj), Reserve: 1 << 20, DiskCheck: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, mem
}

// TestWALWriteStalls: a write-ahead log write that meets ENOSPC even
// after the reserve is freed waits for space instead of failing (Pebble
// cannot go on after a failed log write), while every new write is
// refused with store.ErrDiskFull and reads go on; once space is back the
// waiting write lands, and the store takes writes again. No panic.
func TestWALWriteStalls(t *testing.T) {
	var fail atomic.Pointer[error]
	s, _ := walFaults(t, &fail)
	ctx := context.Background()
	gen := new(task.IDGenerator)
	now := time.Now()
	held := countsTask(gen, now, "shop", "", task.Scheduled)
	if _, err := s.Create(ctx, []*task.Task{held}); err != nil {
		t.Fatal(err)
	}
	enospc := error(syscall.ENOSPC)
	fail.Store(&enospc)
	done := make(chan error, 1)
	go func() {
		_, err := s.Update(ctx, held.ID, nil, func(tk *task.Task) error { tk.Attempts = 42; return nil })
		done <- err
	}()
	testkit.WaitFor(t, 5*time.Second, "the store refusing writes", func() bool { return s.Health() != nil })
	if err := s.Health(); !errors.Is(err, store.ErrDiskFull) {
		t.Errorf("Health = %v, want store.ErrDiskFull", err)
	}
	if _, err := s.Create(ctx, []*task.Task{countsTask(gen, now, "shop", "", task.Scheduled)}); !errors.Is(err, store.ErrDiskFull) {
		t.Errorf("Create while a log write waits for space: %v, want store.ErrDiskFull", err)
	}
	other := countsTask(gen, now, "shop", "", task.Scheduled)
	if _, err := s.Get(ctx, other.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get while a log write waits for space: %v, want store.ErrNotFound", err)
	}
	select {
	case err := <-done:
		t.Fatalf("the Update whose log write met ENOSPC returned (%v), want it waiting for space", err)
	default:
	}

	fail.Store(nil) // space is back
	if err := <-done; err != nil {
		t.Fatalf("the Update that waited for space: %v", err)
	}
	testkit.WaitFor(t, 5*time.Second, "the store taking new tasks again", func() bool {
		_, err := s.Create(ctx, []*task.Task{countsTask(gen, now, "shop", "", task.Scheduled)})
		return err == nil
	})
	if got, err := s.Get(ctx, held.ID); err != nil || got.Attempts != 42 {
		t.Errorf("the task whose update waited: %+v, %v; want 42 attempts", got, err)
	}
}

// TestWALWriteFails: a write-ahead log write that fails otherwise (EIO)
// fails for good in Pebble: it is answered with an error (Pebble's fatal
// commit error recovered, not a panic), every later write too, reads go
// on, and the store opens its database again by itself, without the
// write that failed.
func TestWALWriteFails(t *testing.T) {
	var fail atomic.Pointer[error]
	s, _ := walFaults(t, &fail)
	ctx := context.Background()
	gen := new(task.IDGenerator)
	now := time.Now()
	held := countsTask(gen, now, "shop", "", task.Scheduled)
	if _, err := s.Create(ctx, []*task.Task{held}); err != nil {
		t.Fatal(err)
	}
	eio := error(syscall.EIO)
	fail.Store(&eio)
	_, err := s.Update(ctx, held.ID, nil, func(tk *task.Task) error { tk.Attempts = 42; return nil })
	if err == nil {
		t.Fatal("Update whose log write fails: no error")
	}
	t.Logf("Update: %v", err)
	fail.Store(nil)
	// The failed write starts a reopen in the background: a read either
	// lands before it or during it, and is refused with the reopen's
	// error; nothing else. (Asserting success here failed about one run in
	// thirty, when the reopen came first.) Before the reopen the read may
	// see the failed write itself, which Pebble applied to its memtable;
	// the reopen drops it (the last check below).
	if _, err := s.Get(ctx, held.ID); err != nil && !errors.Is(err, store.ErrDiskFull) {
		t.Errorf("Get after the log failed: %v, want the task or the reopen's store.ErrDiskFull", err)
	}
	testkit.WaitFor(t, 5*time.Second, "the store taking writes again", func() bool {
		_, err := s.Update(ctx, held.ID, nil, func(tk *task.Task) error { tk.Attempts++; return nil })
		return err == nil
	})
	if err := s.Health(); err != nil {
		t.Errorf("Health once reopened: %v", err)
	}
	if got, err := s.Get(ctx, held.ID); err != nil || got.Attempts != 1 {
		t.Errorf("the task whose update failed, then one that went through: %+v, %v; want 1 attempt", got, err)
	}
}

// TestOpenFullDisk: a store opened on a full disk starts refusing new
// tasks when it can free its reserve, and is refused with a message saying
// what to do when it cannot.
func TestOpenFullDisk(t *testing.T) {
	root := testsvc.Tmpfs(t, 64<<20)
	dir := filepath.Join(root, "db")
	o := pebblestore.Options{Dir: dir, Reserve: 4 << 20, DiskCheck: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))}
	s, err := pebblestore.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(root, "filler")
	testsvc.FillDisk(t, filler)

	s, err = pebblestore.Open(o)
	if err != nil {
		t.Fatalf("Open on a full disk with a reserve to free: %v", err)
	}
	if err := s.Health(); !errors.Is(err, store.ErrDiskFull) {
		t.Errorf("Health = %v, want store.ErrDiskFull", err)
	}
	if _, err := s.Create(context.Background(), []*task.Task{countsTask(new(task.IDGenerator), time.Now(), "shop", "", task.Scheduled)}); !errors.Is(err, store.ErrDiskFull) {
		t.Errorf("Create = %v, want store.ErrDiskFull", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	testsvc.FillDisk(t, filler+"2") // the reserve's room too
	_, err = pebblestore.Open(o)
	if !errors.Is(err, store.ErrDiskFull) || !strings.Contains(err.Error(), "free space") {
		t.Fatalf("Open on a full disk without a reserve: %v, want store.ErrDiskFull saying to free space", err)
	}
	t.Logf("Open: %v", err)
}

// TestDiskFullPastReserve: writers keep writing while the disk fills and
// then another program takes the reserve's room too: every write that
// fails says the disk is full (no panic, no hang), and once space is freed
// the store takes every write again by itself.
func TestDiskFullPastReserve(t *testing.T) {
	root := testsvc.Tmpfs(t, 96<<20)
	dir := filepath.Join(root, "db")
	s, err := pebblestore.Open(pebblestore.Options{Dir: dir, Reserve: 8 << 20, DiskCheck: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	var gen task.IDGenerator
	now := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed, other atomic.Int64
	var otherErr atomic.Value
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []task.ID
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if w%2 == 0 || len(mine) == 0 {
					tk := countsTask(&gen, now, "shop", "", task.Scheduled)
					tk.Payload = make([]byte, 4096)
					if _, err = s.Create(ctx, []*task.Task{tk}); err == nil {
						mine = append(mine, tk.ID)
					}
				} else {
					_, errs := s.UpdateMany(ctx, mine[len(mine)-1:], nil, func(ts []*task.Task) []error {
						ts[0].LastError = strings.Repeat("y", 2000)
						ts[0].Attempts++
						return make([]error, 1)
					})
					err = errs[0]
				}
				switch {
				case err == nil:
				case errors.Is(err, store.ErrDiskFull):
					failed.Add(1)
				default:
					other.Add(1)
					otherErr.Store(err.Error())
				}
			}
		}()
	}
	filler := filepath.Join(root, "filler")
	testsvc.FillDisk(t, filler)
	testkit.WaitFor(t, 5*time.Second, "the disk found full", s.DiskFull)
	testsvc.FillDisk(t, filler+"2") // the reserve's room, taken by someone else
	// Writes are refused, or, when the log met ENOSPC past the reserve,
	// those under way wait for space and the others are refused.
	testkit.WaitFor(t, 10*time.Second, "writes refused for lack of space", func() bool {
		err := s.Health()
		return failed.Load() > 100 || (err != nil && strings.Contains(err.Error(), "reserve used up"))
	})
	t.Logf("Health past the reserve: %v", s.Health())
	for _, f := range []string{filler, filler + "2"} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	close(stop) // else they fill the disk again
	wg.Wait()
	testkit.WaitFor(t, 10*time.Second, "the store healthy again", func() bool { return s.Health() == nil })
	if n := other.Load(); n > 0 {
		t.Errorf("%d writes failed otherwise than store.ErrDiskFull, the last: %v", n, otherErr.Load())
	}
	tk := countsTask(&gen, now, "shop", "", task.Scheduled)
	if _, err := s.Create(ctx, []*task.Task{tk}); err != nil {
		t.Errorf("Create once space is back: %v", err)
	}
	t.Logf("%d writes refused for lack of space", failed.Load())
}

// TestStopWaiting: a write waiting for space past the reserve gives up
// when the server begins to shut down (StopWaiting), and Close returns.
func TestStopWaiting(t *testing.T) {
	var fail atomic.Pointer[error]
	s, _ := walFaults(t, &fail)
	ctx := context.Background()
	gen := new(task.IDGenerator)
	held := countsTask(gen, time.Now(), "shop", "", task.Scheduled)
	if _, err := s.Create(ctx, []*task.Task{held}); err != nil {
		t.Fatal(err)
	}
	enospc := error(syscall.ENOSPC)
	fail.Store(&enospc)
	done := make(chan error, 1)
	go func() {
		_, err := s.Update(ctx, held.ID, nil, func(tk *task.Task) error { tk.Attempts = 42; return nil })
		done <- err
	}()
	testkit.WaitFor(t, 5*time.Second, "the write waiting for space", func() bool { return s.Health() != nil })
	s.StopWaiting()
	select {
	case err := <-done:
		if !errors.Is(err, store.ErrDiskFull) {
			t.Errorf("the write that gave up: %v, want store.ErrDiskFull", err)
		}
		t.Logf("Update: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the write waiting for space did not give up within 10s of StopWaiting")
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Logf("Close: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return within 20s")
	}
}
