package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// pullSource is where a lease finds the pull tasks due: the part of
// leases that differs between one node and a cluster. The index adapter
// gives it (engIdx.pullSource), so that leases itself has no mode.
type pullSource interface {
	// first leases what this process holds of app (one node's ready
	// queue, in memory) and says whether to look further, reading up to
	// scan store entries.
	first(ctx context.Context, app string, p LeaseParams) (got []*task.Task, more bool, scan int)
	// find returns the ids of up to want pull tasks of app due now to
	// lease, the first taken of them held for this call by the cluster
	// index (untake gives back what was not leased), the rest from a
	// store scan of up to scan entries.
	find(ctx context.Context, app string, want, scan int) (ids []task.ID, taken int, err error)
	// leasable reports whether t, read under its row lock, is the store
	// path's to lease (on one node the wheel's pull tasks come to the
	// ready queue instead).
	leasable(t *task.Task) bool
	// untake gives back to the cluster index the tasks find took from it
	// that the call did not lease (ts: their rows, errs: their writes).
	untake(ctx context.Context, app string, ids []task.ID, ts []written, errs []error, now time.Time)
}

// pullSourceParams are what the sources use of the engine and the store.
type pullSourceParams struct {
	clock clock.Clock
	log   *slog.Logger
	// claimable is Store.Claimable; waiting is the store's
	// ClaimableWaiting (store.WaitingClaimer), or Claimable when it has
	// none.
	claimable, waiting func(ctx context.Context, app string, now time.Time, limit int) ([]task.ID, error)
	// The held path (pull.go), on one node: takeQueued leases from app's
	// ready queue; firing says fire jobs have due tasks left to look at;
	// storeDue says a call may look in the store for app at now,
	// storeScan how many to read for want; notHeld leaves out the ids
	// held here, heldPull says whether one is.
	takeQueued func(ctx context.Context, app string, p LeaseParams) []*task.Task
	firing     func() bool
	storeDue   func(app string, now time.Time) bool
	storeScan  func(app string, want int) int
	notHeld    func(ids []task.ID) []task.ID
	heldPull   func(id task.ID) bool
}

// claimableWaiting is s's ClaimableWaiting, or its Claimable when it has
// none.
func claimableWaiting(s store.Store) func(ctx context.Context, app string, now time.Time, limit int) ([]task.ID, error) {
	if w, ok := store.As[store.WaitingClaimer](s); ok {
		return w.ClaimableWaiting
	}
	return s.Claimable
}

// heldSource is one node's: the pull tasks due are held in memory
// (pull.go) and leased from the app's ready queue; the store is looked in
// for those waiting there (written so by an older version, or past
// pullHoldMax) only while the fire path has no due task left to look at,
// at most as often as storeDue lets it.
type heldSource struct{ p pullSourceParams }

func (s heldSource) first(ctx context.Context, app string, p LeaseParams) ([]*task.Task, bool, int) {
	got := s.p.takeQueued(ctx, app, p)
	if len(got) == p.Max || s.p.firing() || !s.p.storeDue(app, s.p.clock.Now()) {
		return got, false, 0
	}
	return got, true, s.p.storeScan(app, p.Max-len(got))
}

func (s heldSource) find(ctx context.Context, app string, _, scan int) ([]task.ID, int, error) {
	// Those the wheel brings to the ready queue are not leasable here:
	// the store's waiting ones are enough where it tells them apart.
	ids, err := s.p.waiting(ctx, app, s.p.clock.Now(), scan)
	if err != nil {
		return nil, 0, fmt.Errorf("find claimable tasks: %w", err)
	}
	return s.p.notHeld(ids), 0, nil // not read for nothing; checked again under the row lock
}

func (s heldSource) leasable(t *task.Task) bool {
	// Stored with its due time as its wake time, or held here: the
	// wheel's, it comes to the ready queue.
	return !t.WakeAt.Equal(t.NextAttemptAt) && !s.p.heldPull(t.ID)
}

func (heldSource) untake(context.Context, string, []task.ID, []written, []error, time.Time) {}

// indexSource is a cluster's: the pull tasks due are found in the
// index (pulls: the slots' PullQueues in Redis, where the mirror of each
// one's create or last write, or its promotion, put it), not by a SQL
// scan per call; the store is scanned as well, at most once every
// storeClaimEvery per app, only when the index did not fill a call (what
// Redis lost before a repair, tasks an older version left due). An index
// that keeps no pull tasks (pulls nil) leaves every call to the store.
type indexSource struct {
	p     pullSourceParams
	pulls pullIndex

	// scans is when each app's store was last scanned (find).
	scans struct {
		sync.Mutex
		at map[string]time.Time
	}
}

func (*indexSource) first(_ context.Context, _ string, p LeaseParams) ([]*task.Task, bool, int) {
	return nil, true, p.Max
}

func (s *indexSource) find(ctx context.Context, app string, want, scan int) (ids []task.ID, taken int, err error) {
	now := s.p.clock.Now()
	x := s.pulls
	if x == nil {
		ids, err := s.p.claimable(ctx, app, now, scan)
		if err != nil {
			return nil, 0, fmt.Errorf("find claimable tasks: %w", err)
		}
		return ids, 0, nil
	}
	ids, err = x.TakePull(ctx, app, want, now, now.Add(pullTakeHold))
	if err != nil {
		s.p.log.WarnContext(ctx, "take pull tasks due from the index; looking in the store", slog.String("app", app), slog.String("error", err.Error()))
	}
	taken = len(ids)
	if taken == want || err == nil && !s.scanDue(app, now) {
		return ids, taken, nil
	}
	more, serr := s.p.claimable(ctx, app, now, want-taken)
	switch {
	case serr != nil && taken == 0:
		return nil, 0, fmt.Errorf("find claimable tasks: %w", serr)
	case serr != nil:
		s.p.log.ErrorContext(ctx, "find claimable tasks", slog.String("app", app), slog.String("error", serr.Error()))
	}
	for _, id := range more {
		if !slices.Contains(ids[:taken], id) {
			ids = append(ids, id)
		}
	}
	return ids, taken, nil
}

func (*indexSource) leasable(*task.Task) bool { return true }

// scanDue reports whether a lease of app that the index did not fill
// scans the store now, and marks the scan.
func (s *indexSource) scanDue(app string, now time.Time) bool {
	s.scans.Lock()
	defer s.scans.Unlock()
	if at, ok := s.scans.at[app]; ok && now.Sub(at) < storeClaimEvery && !now.Before(at) {
		return false
	}
	if s.scans.at == nil {
		s.scans.at = map[string]time.Time{}
	}
	s.scans.at[app] = now
	return true
}

// untake gives the cluster index back the pull tasks ids (their rows ts,
// their write's errs) that take took from it and did not write (those it
// wrote, leased or expired, were mirrored: their members moved). A task due
// and waiting (the call was full, or its write failed) is taken again from
// now on; one not stored or not waiting (leased by another call, moved)
// leaves the index's pull tasks due, where its own write's mirror put it
// back if it is due again.
func (s *indexSource) untake(ctx context.Context, app string, ids []task.ID, ts []written, errs []error, now time.Time) {
	if len(ids) == 0 {
		return
	}
	var back, stale []*task.Task
	var gone []task.ID
	for i, err := range errs {
		t := ts[i].t
		switch {
		case err == nil:
		case t == nil || errors.Is(err, store.ErrNotFound):
			gone = append(gone, ids[i])
		case errors.Is(err, errSkip) && (t.State != task.Scheduled || t.Target.Pull == nil || t.NextAttemptAt.After(now)):
			stale = append(stale, t)
		default:
			back = append(back, t)
		}
	}
	if len(back)+len(stale)+len(gone) == 0 {
		return
	}
	uctx, cancel := detached(ctx)
	defer cancel()
	if err := s.pulls.Untake(uctx, app, back, stale, gone, now); err != nil {
		// Each is taken again when its hold ends.
		s.p.log.WarnContext(ctx, "give back pull tasks to the index", slog.String("app", app), slog.Int("tasks", len(back)+len(stale)+len(gone)), slog.String("error", err.Error()))
	}
}
