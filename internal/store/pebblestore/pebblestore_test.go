package pebblestore_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// open opens a store in dir that logs to the test.
func open(t *testing.T, dir string) *pebblestore.Store {
	t.Helper()
	s, err := pebblestore.Open(pebblestore.Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, t.TempDir()) })
}

func TestSchedules(t *testing.T) {
	storetest.RunSchedules(t, func(t *testing.T) store.Store { return open(t, t.TempDir()) })
}

func TestDurability(t *testing.T) {
	storetest.RunDurability(t, func(t *testing.T, dir string) store.Store { return open(t, dir) })
}

func TestOpenValidates(t *testing.T) {
	_, err := pebblestore.Open(pebblestore.Options{})
	if err == nil || !strings.Contains(err.Error(), "Options.Dir") {
		t.Errorf("Open(no Dir) error = %v, want one naming Options.Dir", err)
	}
}

// TestLogger checks that Pebble's chatter goes to the logger, at Debug.
func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := pebblestore.Open(pebblestore.Options{Dir: t.TempDir(), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "level=DEBUG") || !strings.Contains(buf.String(), "WALs") {
		t.Errorf("log = %q, want Pebble's messages at Debug", buf.String())
	}
}
