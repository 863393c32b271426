// Package lograte bounds how often a recurring error is logged: a fault
// that fails every write (a full disk) must not flood the log.
package lograte

import (
	"log/slog"
	"sync"
	"time"
)

// Limiter logs at most one line every Every; the lines it leaves out are
// counted in the next one (suppressed_since_last). The zero value is
// ready to use with Every 0 (every line logged). Safe for concurrent use.
type Limiter struct {
	Every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Log logs msg with err at level on log, unless a line was logged less
// than Every ago.
func (l *Limiter) Log(log *slog.Logger, level slog.Level, msg string, err error) {
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.Every {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	log.Log(nil, level, msg, slog.String("error", err.Error()), slog.Int("suppressed_since_last", n))
}
