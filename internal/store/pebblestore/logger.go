package pebblestore

import (
	"context"
	"fmt"
	"log/slog"
)

// pebbleLogger routes Pebble's log to slog. Pebble's informational messages
// ("Found 0 WALs" on every open) go to Debug, so they stay quiet by default;
// Pebble's default logger prints them through the standard log package.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug(fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}

// Fatalf logs and panics: Pebble calls it when it cannot go on (its own
// default logger exits the process).
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic("pebble: " + msg)
}
