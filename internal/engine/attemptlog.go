package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/toc-dev/toc/internal/lograte"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// # Attempts are counted when they start
//
// A push attempt is stored only at its outcome (fire.go). So that a crash
// during an attempt does not make its number repeat (and a task that
// crashes toc every time is not retried past max_attempts), every attempt
// is counted when it starts, without a synced write on the fire path:
//
//   - On one node the store's attempt log (store.AttemptLog) gets one
//     unsynced append per attempt, just before it is sent (not when its
//     fire job starts it: an attempt waiting for a worker when toc stops
//     was not made, and does not count). At start, the attempts the log
//     names that have no outcome stored (the process died during them) are
//     counted: each such task gets them, "interrupted" in its history, and
//     is dead when no attempt is left (countInterrupted). Every
//     attemptLogMax notes the log starts over with the attempts under way
//     (one fsync). A process killed loses no note; a machine crash may lose
//     the last ones, and then an attempt number may repeat.
//   - In a cluster the index numbers the attempts as it claims them
//     (Index.Claim, one counter per task in Redis).
//
// Either way an attempt has its number from its start (firing.n), and its
// outcome is fenced by it (outcomes.write).

// attemptLog counts the attempts as they start, on one node (the cluster's
// index numbers them in a cluster: its log is nil there, and so when the
// store keeps none). Its only state is the count of notes since the log
// started over (atomic) and the limit on its log lines.
type attemptLog struct {
	alog     store.AttemptLog // nil: no log
	store    store.Store
	attempts *attempts
	log      *slog.Logger
	noted    atomic.Int64
	errs     lograte.Limiter
}

// attemptLogMax is how many attempts the log notes before it starts over
// (20 bytes each in pebblestore).
var attemptLogMax int64 = 50_000 // a test lowers it

// note appends the attempts ts (about to be sent) to the attempt
// log, or starts the log over with the attempts under way when it is long
// enough. A failure is logged: the attempts go ahead, and only their
// numbers may repeat after a crash.
func (l *attemptLog) note(ctx context.Context, ts ...*task.Task) {
	if l.alog == nil || len(ts) == 0 {
		return
	}
	wctx := context.WithoutCancel(ctx) // a file append: nothing to wait for
	if l.noted.Add(int64(len(ts))) > attemptLogMax {
		l.noted.Store(0)
		if err := l.alog.RestartAttemptLog(wctx, l.attempts.started); err != nil {
			l.log.WarnContext(ctx, "start the attempt log over", slog.String("error", err.Error()))
		}
		return // ts are under way (attempts.go): in the new log
	}
	ids := make([]task.ID, len(ts))
	ns := make([]int, len(ts))
	for i, t := range ts {
		ids[i], ns[i] = t.ID, t.Attempts
	}
	if err := l.alog.NoteAttempts(wctx, ids, ns); err != nil {
		// Once per attempt it would flood the log while the disk is full.
		l.errs.Log(l.log, slog.LevelWarn, "note attempts started; a crash during them would not count them", err)
	}
}

// noteErrorsEvery bounds the log lines of failed attempt notes.
const noteErrorsEvery = 10 * time.Second

// interruptedMsg is the error of an attempt that had no outcome.
const interruptedMsg = "interrupted: toc stopped during the delivery"

// countInterrupted counts, at start, the attempts the attempt log names
// that have no outcome stored (the process stopped during them): each such
// task gets its attempts, an "interrupted" event, and is dead when it has
// none left; otherwise it is delivered again when due (it still is). Then
// the log starts over, empty.
func (l *attemptLog) countInterrupted(ctx context.Context, now time.Time) error {
	if l.alog == nil {
		return nil
	}
	noted, err := l.alog.NotedAttempts(ctx)
	if err != nil {
		return fmt.Errorf("count attempts interrupted by a stop: %w", err)
	}
	ids := slices.SortedFunc(maps.Keys(noted), func(a, b task.ID) int { return bytes.Compare(a[:], b[:]) })
	now = task.Ms(now)
	counted, dead := 0, 0
	for chunk := range slices.Chunk(ids, 500) {
		_, errs := l.store.UpdateMany(ctx, chunk, nil, func(ts []*task.Task) []error {
			errs := make([]error, len(ts))
			for i, t := range ts {
				n := noted[chunk[i]]
				if t == nil || t.State != task.Scheduled || t.Attempts >= n {
					errs[i] = errSkip // its outcome was stored, or it moved on
					continue
				}
				countInterrupted(t, n, now)
				if t.State == task.Dead {
					dead++
				}
			}
			return errs
		})
		for i, err := range errs {
			switch {
			case err == nil:
				counted++
			case errors.Is(err, errSkip), errors.Is(err, store.ErrNotFound):
			default:
				return fmt.Errorf("count the interrupted attempts of task %s: %w", chunk[i], err)
			}
		}
	}
	if counted > 0 {
		l.log.InfoContext(ctx, "counted push attempts interrupted by a stop", slog.Int("tasks", counted), slog.Int("dead", dead))
	}
	if err := l.alog.RestartAttemptLog(ctx, func() ([]task.ID, []int) { return nil, nil }); err != nil {
		return fmt.Errorf("start the attempt log: %w", err)
	}
	return nil
}

// countInterrupted gives t, scheduled with fewer attempts, its attempts up
// to n, the last of which had no outcome: it is dead when that was its last
// attempt, and otherwise stays due.
func countInterrupted(t *task.Task, n int, now time.Time) {
	t.Attempts = n
	t.LastError = interruptedMsg
	t.Record(now, "interrupted", n, interruptedMsg)
	t.UpdatedAt = now
	if n >= t.Retry.WithDefaults().MaxAttempts {
		finish(t, task.Dead, now)
	}
}
