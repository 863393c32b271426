package server

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/config"
)

// TestWatchConfigSeesEditDuringStart: an edit of the config file made
// after it was loaded at start, but before the watcher's first look, is
// applied. The watcher took its first look as the baseline, so such an
// edit was missed until the next one (e2e TestConfigReload failed now and
// then in CI: its edit came right after the server listened).
func TestWatchConfigSeesEditDuringStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toc.yaml")
	if err := os.WriteFile(path, []byte("apps:\n  shop:\n    max_payload: 10\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded := StampOf(path) // what serve loaded
	if err := os.WriteFile(path, []byte("apps:\n  shop:\n    max_payload: 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	applied := make(chan int, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchConfig(ctx, path, loaded, 10*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)), func(f *config.File) error {
			select {
			case applied <- f.Apps["shop"].MaxPayload:
			default:
			}
			return nil
		})
	}()
	select {
	case got := <-applied:
		if got != 100 {
			t.Errorf("applied max_payload %d, want the edit's 100", got)
		}
	case <-time.After(5 * time.Second):
		t.Error("the edit made before the watcher's first look was never applied")
	}
	cancel()
	<-done
}
