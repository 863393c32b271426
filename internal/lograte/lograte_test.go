package lograte

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestLimiter: within Every one line is logged; the next one after it
// counts those left out.
func TestLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		l := &Limiter{Every: 10 * time.Second}
		for range 5 {
			l.Log(log, slog.LevelWarn, "note attempts", errors.New("no space left on device"))
		}
		if n := strings.Count(buf.String(), "\n"); n != 1 {
			t.Fatalf("%d lines within Every, want 1:\n%s", n, &buf)
		}
		time.Sleep(10 * time.Second)
		l.Log(log, slog.LevelWarn, "note attempts", errors.New("no space left on device"))
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 2 || !strings.Contains(lines[1], "suppressed_since_last=4") {
			t.Errorf("after Every: %q, want a second line counting the 4 left out", lines)
		}
	})
}
