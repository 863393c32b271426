package pebblestore_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/task"
)

// TestAttemptLog: notes are read back after the store is reopened (the
// highest attempt per task); a record cut short is ignored; starting over
// keeps only the attempts under returns; a note before the log was started
// is refused.
func TestAttemptLog(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now()
	a, b, c := g.New(now, 0), g.New(now, 0), g.New(now, 0)
	if err := s.NoteAttempts(ctx, []task.ID{a}, []int{1}); err == nil {
		t.Error("a note before RestartAttemptLog was taken")
	}
	if err := s.RestartAttemptLog(ctx, func() ([]task.ID, []int) { return []task.ID{c}, []int{7} }); err != nil {
		t.Fatal(err)
	}
	if err := s.NoteAttempts(ctx, []task.ID{a, b}, []int{1, 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.NoteAttempts(ctx, []task.ID{a}, []int{2}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash during a write leaves a record cut short.
	f, err := os.OpenFile(filepath.Join(dir, pebblestore.AttemptLogName), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(a[:10]); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	s = open(t, dir)
	defer s.Close()
	noted, err := s.NotedAttempts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[task.ID]int{a: 2, b: 3, c: 7}; !maps.Equal(noted, want) {
		t.Errorf("noted %v, want %v", noted, want)
	}
	if err := s.RestartAttemptLog(ctx, func() ([]task.ID, []int) { return []task.ID{b}, []int{4} }); err != nil {
		t.Fatal(err)
	}
	if noted, err := s.NotedAttempts(ctx); err != nil || !maps.Equal(noted, map[task.ID]int{b: 4}) {
		t.Errorf("after starting over: %v %v, want only %s: 4", noted, err, b)
	}
}

// BenchmarkNoteAttempts: the attempt log's cost per push attempt (one
// write(2)).
func BenchmarkNoteAttempts(b *testing.B) {
	s, err := pebblestore.Open(pebblestore.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.RestartAttemptLog(ctx, func() ([]task.ID, []int) { return nil, nil }); err != nil {
		b.Fatal(err)
	}
	var g task.IDGenerator
	ids := []task.ID{g.New(time.Now(), 0)}
	ns := []int{1}
	for b.Loop() {
		if err := s.NoteAttempts(ctx, ids, ns); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAttemptLogMapped: on Linux a note is a copy into the log's mapped
// region, without a write(2) (one per attempt cost about 4 µs of CPU per
// fire); once the region is full, notes are appended after it by write(2);
// every note is read back after the store is reopened, and those of the
// log started over are gone.
func TestAttemptLogMapped(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the attempt log is mapped on Linux only")
	}
	dir := t.TempDir()
	fs := &countingFS{FS: vfs.Default}
	s, err := pebblestore.Open(pebblestore.Options{Dir: dir, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var g task.IDGenerator
	now := time.Now()
	old := g.New(now, 0)
	if err := s.RestartAttemptLog(ctx, func() ([]task.ID, []int) { return []task.ID{old}, []int{1} }); err != nil {
		t.Fatal(err)
	}
	if err := s.NoteAttempts(ctx, []task.ID{old}, []int{2}); err != nil {
		t.Fatal(err)
	}
	under := g.New(now, 0)
	if err := s.RestartAttemptLog(ctx, func() ([]task.ID, []int) { return []task.ID{under}, []int{3} }); err != nil {
		t.Fatal(err)
	}
	want := map[task.ID]int{under: 3}
	const room = 1 << 16 // pebblestore's mapRecords
	writes0 := fs.writes.Load()
	for i := range room + 3 {
		id := g.New(now, 0)
		want[id] = i%7 + 1
		if err := s.NoteAttempts(ctx, []task.ID{id}, []int{i%7 + 1}); err != nil {
			t.Fatal(err)
		}
		if i == room-1 {
			if n := fs.writes.Load() - writes0; n != 0 {
				t.Errorf("%d notes in the region made %d write(2) calls, want none", room, n)
			}
		}
	}
	if n := fs.writes.Load() - writes0; n != 3 {
		t.Errorf("3 notes past the region made %d write(2) calls, want 3", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	noted, err := s.NotedAttempts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(noted, want) {
		t.Errorf("read back %d notes, want %d (the first note: %v, want %v)", len(noted), len(want), noted[under], want[under])
	}
}

// TestAttemptLogRestartsUnderNotes: notes from many goroutines while the
// log starts over (which unmaps the region they copy into) all land, in
// the old log or the new one (-race and a fault would tell otherwise).
func TestAttemptLogRestartsUnderNotes(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	ctx := context.Background()
	if err := s.RestartAttemptLog(ctx, func() ([]task.ID, []int) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	var g task.IDGenerator
	var mu sync.Mutex
	now := time.Now()
	var wg sync.WaitGroup
	last := make([][]task.ID, 8)
	for w := range last {
		ids := make([]task.ID, 500)
		for i := range ids {
			mu.Lock()
			ids[i] = g.New(now, 0)
			mu.Unlock()
		}
		last[w] = ids
		wg.Go(func() {
			for _, id := range ids {
				if err := s.NoteAttempts(ctx, []task.ID{id}, []int{1}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 20 {
		if err := s.RestartAttemptLog(ctx, func() ([]task.ID, []int) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	// The notes after the last restart are in the log; one more note
	// after all of them lands too.
	extra := g.New(now, 0)
	if err := s.NoteAttempts(ctx, []task.ID{extra}, []int{5}); err != nil {
		t.Fatal(err)
	}
	noted, err := s.NotedAttempts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if noted[extra] != 5 {
		t.Errorf("the note after the restarts read back as %d, want 5", noted[extra])
	}
}

// countingFS counts the write(2) calls to the attempt log's files.
type countingFS struct {
	vfs.FS
	writes atomic.Int64
}

func (fs *countingFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil || !strings.Contains(name, pebblestore.AttemptLogName) {
		return f, err
	}
	return &countingFile{File: f, n: &fs.writes}, nil
}

type countingFile struct {
	vfs.File
	n *atomic.Int64
}

func (f *countingFile) Write(p []byte) (int, error) {
	f.n.Add(1)
	return f.File.Write(p)
}

func (f *countingFile) WriteAt(p []byte, off int64) (int, error) {
	f.n.Add(1)
	return f.File.WriteAt(p, off)
}
