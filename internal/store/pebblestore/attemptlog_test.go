package pebblestore_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

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
