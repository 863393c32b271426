package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

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
//     unsynced entry per fire job, naming the attempts the job starts,
//     written before the first of them is delivered. An entry is deleted
//     (with the next entry's write) once every attempt it names has its
//     outcome stored. At start, the attempts of the entries left (the
//     process died during them) are counted: each task whose stored
//     attempts are fewer gets them, "interrupted" in its history, and is
//     dead when no attempt is left (countInterrupted). A process killed
//     loses no entry the operating system took; a machine crash may lose
//     the last ones, and then an attempt number may repeat.
//   - In a cluster the index numbers the attempts as it claims them
//     (Index.Claim, one counter per task in Redis).
//
// Either way an attempt has its number from its start (firing.n), and its
// outcome is fenced by it (storeOutcomes).

// notes is the engine's side of the attempt log: the entries written, and
// those whose attempts have all ended. Guarded by e.out.
type notes struct {
	seq  uint64         // the last entry's number
	left map[uint64]int // by entry: its attempts not yet ended
	done []uint64       // entries to delete with the next write
}

// noteAttempts writes the attempt log's entry for the attempts ts (started,
// not yet delivered), with the deletion of the entries whose attempts have
// all ended. A failure is logged: the attempts go ahead, and only their
// numbers may repeat after a crash.
func (e *Engine) noteAttempts(ctx context.Context, ts []*task.Task) {
	if e.alog == nil || len(ts) == 0 {
		return
	}
	ids := make([]task.ID, len(ts))
	ns := make([]int, len(ts))
	for i, t := range ts {
		ids[i], ns[i] = t.ID, t.Attempts
	}
	e.out.Lock()
	n := &e.out.notes
	n.seq++
	seq, drop := n.seq, n.done
	n.done = nil
	if n.left == nil {
		n.left = make(map[uint64]int)
	}
	n.left[seq] = len(ts)
	for _, t := range ts {
		if a := e.out.attempts[t.ID]; a != nil {
			a.note = seq
		}
	}
	e.out.Unlock()
	wctx, cancel := detached(ctx)
	defer cancel()
	if err := e.alog.NoteAttempts(wctx, seq, ids, ns, drop); err != nil {
		e.log.WarnContext(ctx, "note attempts started; a crash during them would not count them", slog.Int("attempts", len(ts)), slog.String("error", err.Error()))
	}
}

// endNoteLocked notes that an attempt of entry seq ended with its outcome
// stored. e.out is held.
func (e *Engine) endNoteLocked(seq uint64) {
	n := &e.out.notes
	if seq == 0 || n.left == nil {
		return
	}
	if n.left[seq]--; n.left[seq] <= 0 {
		delete(n.left, seq)
		n.done = append(n.done, seq)
	}
}

// flushNotes deletes the entries whose attempts have all ended (at Stop;
// the entries of attempts cut short stay, and count at the next start).
func (e *Engine) flushNotes() {
	if e.alog == nil {
		return
	}
	e.out.Lock()
	drop := e.out.notes.done
	e.out.notes.done = nil
	e.out.Unlock()
	if len(drop) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := e.alog.DropAttempts(ctx, drop); err != nil {
		e.log.Warn("delete attempt log entries", slog.String("error", err.Error()))
	}
}

// interruptedMsg is the error of an attempt that had no outcome.
const interruptedMsg = "interrupted: toc stopped during the delivery"

// countInterrupted counts, at start, the attempts the attempt log names
// that have no outcome stored (the process stopped during them): each such
// task gets its attempts, an "interrupted" event, and is dead when it has
// none left; otherwise it is delivered again when due (it still is). Then
// the log is emptied.
func (e *Engine) countInterrupted(ctx context.Context, now time.Time) error {
	if e.alog == nil {
		return nil
	}
	noted, seqs, err := e.alog.NotedAttempts(ctx)
	if err != nil {
		return fmt.Errorf("count attempts interrupted by a stop: %w", err)
	}
	ids := slices.SortedFunc(maps.Keys(noted), func(a, b task.ID) int { return bytes.Compare(a[:], b[:]) })
	now = task.Ms(now)
	counted, dead := 0, 0
	for chunk := range slices.Chunk(ids, 500) {
		_, errs := e.store.UpdateMany(ctx, chunk, nil, func(ts []*task.Task) []error {
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
		e.log.InfoContext(ctx, "counted push attempts interrupted by a stop", slog.Int("tasks", counted), slog.Int("dead", dead))
	}
	if len(seqs) > 0 {
		if err := e.alog.DropAttempts(ctx, seqs); err != nil {
			return fmt.Errorf("empty the attempt log: %w", err)
		}
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
