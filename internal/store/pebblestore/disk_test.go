//go:build linux

package pebblestore_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// waitFor polls cond until it holds or within has passed.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

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
	waitFor(t, 5*time.Second, "a create refused", func() bool {
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
	waitFor(t, 5*time.Second, "new tasks taken again", func() bool {
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

// TestWALWriteFails: a write-ahead log write that fails with ENOSPC even
// after the reserve is freed is answered store.ErrDiskFull (Pebble's fatal
// commit error is recovered, not a panic), and so is every later write,
// while reads go on; once space is back the store opens its database
// again by itself and takes writes, without the write that failed.
func TestWALWriteFails(t *testing.T) {
	var fail atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if fail.Load() && op.Kind == errorfs.OpFileWrite && strings.HasSuffix(op.Path, ".log") {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
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
	defer func() { _ = s.Close() }()
	ctx := context.Background()
	gen := new(task.IDGenerator)
	now := time.Now()
	held := countsTask(gen, now, "shop", "", task.Scheduled)
	if _, err := s.Create(ctx, []*task.Task{held}); err != nil {
		t.Fatal(err)
	}
	// The disk fills, past the reserve: an outcome's log write fails.
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1, TotalBytes: 2 << 30, UsedBytes: 2<<30 - 1})
	fail.Store(true)
	_, err = s.Update(ctx, held.ID, nil, func(tk *task.Task) error { tk.Attempts = 42; return nil })
	if !errors.Is(err, store.ErrDiskFull) {
		t.Fatalf("Update whose log write fails: %v, want store.ErrDiskFull", err)
	}
	t.Logf("Update: %v", err)
	fail.Store(false)
	_, err = s.Update(ctx, held.ID, nil, func(tk *task.Task) error { tk.Attempts = 7; return nil })
	if !errors.Is(err, store.ErrDiskFull) {
		t.Errorf("Update after the log failed: %v, want store.ErrDiskFull", err)
	}
	if _, err := s.Create(ctx, []*task.Task{countsTask(gen, now, "shop", "", task.Scheduled)}); !errors.Is(err, store.ErrDiskFull) {
		t.Errorf("Create after the log failed: %v, want store.ErrDiskFull", err)
	}
	if err := s.Health(); !errors.Is(err, store.ErrDiskFull) {
		t.Errorf("Health = %v, want store.ErrDiskFull", err)
	}
	if _, err := s.Get(ctx, held.ID); err != nil {
		t.Errorf("Get after the log failed: %v", err)
	}

	// Space is back: the store opens its database again by itself.
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30, UsedBytes: 1 << 30})
	waitFor(t, 5*time.Second, "the store taking new tasks again", func() bool {
		_, err := s.Create(ctx, []*task.Task{countsTask(gen, now, "shop", "", task.Scheduled)})
		return err == nil
	})
	if err := s.Health(); err != nil {
		t.Errorf("Health once reopened: %v", err)
	}
	got, err := s.Get(ctx, held.ID)
	if err != nil || got.Attempts != 0 {
		t.Errorf("the task whose update failed: %+v, %v; want it as created (0 attempts)", got, err)
	}
	if _, err := s.Update(ctx, held.ID, nil, func(tk *task.Task) error { tk.Attempts = 1; return nil }); err != nil {
		t.Errorf("Update once reopened: %v", err)
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
