package pebblestore

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestEventsLogged: flushes and compactions reach the logger at Debug.
func TestEventsLogged(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := Open(Options{Dir: "db", FS: vfs.NewMem(), Logger: logger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 2 {
		if err := s.db.Set([]byte{'x', byte(i)}, []byte("v"), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Compact(t.Context(), []byte("x"), []byte("y"), true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"flushed", "compacted"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q at Debug:\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), "level=INFO") {
		t.Errorf("Pebble's events logged above Debug:\n%s", buf.String())
	}
}

// TestBackgroundErrorsLimited: Pebble's background errors (which it
// retries at once, hundreds of times a second on a full disk) are all
// counted, and logged at most once every backgroundLogEvery.
func TestBackgroundErrorsLimited(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	s, err := Open(Options{Dir: "db", FS: vfs.NewMem(), Logger: logger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 1000 {
		eventListener(pebbleLogger{l: logger, d: s.disk}).BackgroundError(errors.New("pebble: flush: some failure"))
	}
	if n := s.BackgroundErrors(); n != 1000 {
		t.Errorf("BackgroundErrors() = %d, want 1000", n)
	}
	if n := strings.Count(buf.String(), "background error"); n != 1 {
		t.Errorf("%d log lines for 1000 background errors, want 1:\n%s", n, buf.String())
	}
}
