package pebblestore

import (
	"context"
	"fmt"
	"log/slog"
)

// pebbleLogger routes Pebble's log to slog. Pebble's informational messages
// ("Found 0 WALs" on every open) go to Debug, so they stay quiet by default;
// Pebble's default logger prints them through the standard log package.
type pebbleLogger struct {
	l *slog.Logger
	d *disk // told of fatal errors
}

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug(fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}

// Fatalf tells the store's disk watch (which logs it and refuses writes
// from then on) and panics with a fatalPanic: Pebble calls it when it
// cannot go on (its own default logger exits the process), and goes on as
// if all were well if it returns. A fatal commit error (a write-ahead log
// write that failed, as on a full disk) is called in the committing
// goroutine, where Store.commit recovers it into an error; elsewhere the
// panic ends the process, as Pebble's default does.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.d.fatal(msg)
	panic(fatalPanic{msg: msg})
}
