package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/toc-dev/toc/internal/recur"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// Moving tasks out of a server and into another: a backup of the whole
// store (embedded mode), and the export and import of tasks in the API's
// own form (any mode to any mode).

// Transfer backs up, exports and imports, over a task writer (the
// creates batcher, which mirrors and tracks what it created). Reached by Engine.Transfer; no
// state of its own besides the process-wide importing token.
type Transfer struct {
	p transferParams
}

// transferParams are what Transfer uses of the engine and the store.
type transferParams struct {
	ready func() error // ErrNotReady unless the engine takes work
	now   func() time.Time
	rules *rules
	// tasks is the store, for listings and the look-up of ids.
	tasks interface {
		List(ctx context.Context, app string, state task.State, after task.ID, limit int) ([]*task.Task, error)
		UpdateMany(ctx context.Context, ids []task.ID, opts *store.UpdateOpts, fn func(ts []*task.Task) []error) ([]*task.Task, []error)
	}
	// counts is the store's store.Counter (nil: it cannot list its apps).
	counts func(ctx context.Context) (map[string]map[task.State]int64, error)
	// checkpoint is the store's store.Checkpointer, nil when it has none
	// or the engine runs in a cluster (Backup answers ErrNoBackup).
	checkpoint func(ctx context.Context, w io.Writer) (store.BackupManifest, error)
	// schedules is the store's schedules (nil: it keeps none).
	schedules store.Schedules
	create    func(ctx context.Context, ts []*task.Task) ([]store.CreateResult, error) // the creates batcher: mirrors and tracks what it created
	// stepNow steps a schedule just stored (the schedule stepper's).
	stepNow func(ctx context.Context, s *task.Schedule, paid int) *task.Schedule
}

// newTransfer returns the Transfer of st: the store's optional parts
// found once here.
func newTransfer(st store.Store, p transferParams) *Transfer {
	p.tasks = st
	if c, ok := store.As[store.Counter](st); ok {
		p.counts = c.Counts
	}
	if cp, ok := store.As[store.Checkpointer](st); ok { // pebblestore's: a cluster runs on sqlstore, which has none
		p.checkpoint = cp.Checkpoint
	}
	p.schedules, _ = store.As[store.Schedules](st)
	return &Transfer{p: p}
}

// ErrNoBackup is Backup's answer when the store makes no backups of its
// own: in cluster mode the SQL databases are the truth and are backed up
// with their own tools, and Redis holds what the nodes rebuild from them.
var ErrNoBackup = errors.New("toc: this server's store makes no backups of its own (cluster mode): back up the SQL databases with their own tools (pg_dump, pg_basebackup or mysqldump, say) and Redis with its own (RDB or AOF); the nodes rebuild Redis's queues from SQL")

// Backup writes a consistent copy of the whole store to w: a tar stream of
// a store directory, as of one instant, that `toc serve --data` opens (see
// [store.Checkpointer]). Creates, updates and deliveries go on meanwhile;
// every write acknowledged before the call is in the copy. It returns
// ErrNoBackup when the store cannot (cluster mode).
func (x *Transfer) Backup(ctx context.Context, w io.Writer) (store.BackupManifest, error) {
	if x.p.checkpoint == nil {
		return store.BackupManifest{}, ErrNoBackup
	}
	return x.p.checkpoint(ctx, w)
}

// # Export
//
// An export walks the store's listing: each app's tasks in each state, in
// id order, a page at a time. The apps are those the store counts
// (store.Counter); a task that changes state while the walk goes on may be
// met in both states or in neither, so an export of a server that still
// fires is a picture taken over time, not at one instant. For a move, export
// a store no server runs on.

// ExportPage is how many tasks an export reads from the store at a time.
const ExportPage = 500

// ExportFilter selects the tasks of an export. Zero fields select all.
type ExportFilter struct {
	App   string     // one app's tasks
	State task.State // the tasks in one state
}

// Export calls emit with every task f selects, app by app (in name order),
// state by state (in task.States order), in id order within each. It stops
// at emit's first error, or ctx's, and returns it with the number of tasks
// emitted before.
func (x *Transfer) Export(ctx context.Context, f ExportFilter, emit func(*task.Task) error) (int, error) {
	if f.App != "" {
		if err := task.ValidateApp(f.App); err != nil {
			return 0, err
		}
	}
	if f.State != "" && !f.State.Valid() {
		return 0, &task.FieldError{Field: "state", Message: fmt.Sprintf("must be one of %v, got %q", task.States, f.State)}
	}
	apps := []string{f.App}
	if f.App == "" {
		if x.p.counts == nil {
			return 0, errors.New("toc: this store cannot list its apps: export one app at a time")
		}
		counts, err := x.p.counts(ctx)
		if err != nil {
			return 0, fmt.Errorf("count the store's tasks: %w", err)
		}
		apps = slices.Sorted(maps.Keys(counts))
	}
	states := task.States
	if f.State != "" {
		states = []task.State{f.State}
	}
	n := 0
	for _, app := range apps {
		for _, st := range states {
			var after task.ID
			for {
				if err := ctx.Err(); err != nil {
					return n, err
				}
				page, err := x.p.tasks.List(ctx, app, st, after, ExportPage)
				if err != nil {
					return n, fmt.Errorf("list %s tasks of app %s: %w", st, app, err)
				}
				for _, t := range page {
					if err := emit(t); err != nil {
						return n, err
					}
					n++
				}
				if len(page) < ExportPage {
					break
				}
				after = page[len(page)-1].ID
			}
		}
	}
	return n, nil
}

// # Import
//
// An import stores tasks another server exported, as they were: ids,
// keys, times, states, attempts, payloads and history. It is idempotent:
// a task already stored under its id (or the id the import gave it) is
// left alone and counted as existing, so a re-run imports nothing twice,
// keyless tasks included.
//
// Each task is checked as a create is (app, key, target with the broker
// rule, retry policy, payload against the app's cap), plus what a create
// does not carry: its state and its times must agree. Nothing of a call is
// stored unless every task passes.
//
// Ids are kept, in every mode: a task answers, is delivered and is found
// by every route under the id it came with. A store with shards (sqlstore)
// keeps it in the shard its id names (modulo its shard count), and a keyed
// one whose key belongs to another shard holds its key there with a key
// claim (see sqlstore's claim.go): reads by id cost what they cost for any
// task, a read by key one extra point read.
//
// A task that was being delivered when it was exported is stored
// scheduled, due now, its attempt given back ("released"): the attempt
// under way on the source may or may not have reached its target, so it
// is made again (at least once).

// ImportResult is what Import did.
type ImportResult struct {
	// Imported counts the tasks stored.
	Imported int
	// Existing counts the tasks left alone: already stored under their id
	// (imported before), or repeated within the call.
	Existing int
	// Released counts the tasks stored scheduled that were being delivered
	// when exported.
	Released int
	// Moved is always empty: ids are kept. Earlier releases stored some
	// tasks of a cluster under a new id and listed them here.
	Moved []MovedID
	// Taken lists the tasks not stored because another task holds their
	// app and key here.
	Taken []TakenKey
}

// MovedID is a task stored under a new id.
type MovedID struct {
	ID    task.ID `json:"id"`     // the id it came with
	NewID task.ID `json:"new_id"` // the id it has here
}

// TakenKey is a task not imported because its key is taken.
type TakenKey struct {
	ID     task.ID `json:"id"`
	App    string  `json:"app"`
	Key    string  `json:"key"`
	Holder task.ID `json:"holder"` // the task that holds the key here
}

// ImportError says which task of an Import call was refused, and why (a
// *task.FieldError, or ErrTooLarge). Nothing of the call was stored.
type ImportError struct {
	Index    int     // in the call's tasks (schedules)
	ID       task.ID // the task's (schedule's) id as given
	Err      error
	Schedule bool // of ImportSchedules
}

func (e *ImportError) Error() string {
	what := "task"
	if e.Schedule {
		what = "schedule"
	}
	return fmt.Sprintf("%s %d (%s): %v", what, e.Index, e.ID, e.Err)
}

func (e *ImportError) Unwrap() error { return e.Err }

// maxImportText bounds a task's last_error and each history event's error.
const maxImportText = 64 << 10

// importing makes one Import at a time per process: two that met on one
// keyless task could both find it absent and both store it (in Pebble the
// second write would overwrite what the first copy became since). It is
// held across an import's store calls, unlike the engine's three mutexes
// (see the package comment), and taken by nothing else; a call waiting
// for it gives up when its context ends.
var importing = make(chan struct{}, 1)

// Import stores ts (at most MaxBatch) as exported by another server; see
// the top of this section. The tasks are changed in place (checked and
// filled). An error is an *ImportError for a task refused, or the call's
// (not ready, store failure).
func (x *Transfer) Import(ctx context.Context, ts []*task.Task) (ImportResult, error) {
	var res ImportResult
	if err := x.p.ready(); err != nil {
		return res, err
	}
	if len(ts) > MaxBatch {
		return res, &task.FieldError{Field: "tasks", Message: fmt.Sprintf("has %d tasks, more than %d", len(ts), MaxBatch)}
	}
	now := x.p.now()
	given := make([]task.ID, len(ts))
	for i, t := range ts {
		given[i] = t.ID
		released, err := x.checkImport(t, now)
		if err != nil {
			return res, &ImportError{Index: i, ID: given[i], Err: err}
		}
		if released {
			res.Released++
		}
	}

	select {
	case importing <- struct{}{}:
		defer func() { <-importing }()
	case <-ctx.Done():
		return res, ctx.Err()
	}
	// Which are stored already (one read for all), and which repeat an
	// earlier one of the call.
	var ids []task.ID
	first := map[task.ID]bool{}
	for _, t := range ts {
		if !first[t.ID] {
			first[t.ID] = true
			ids = append(ids, t.ID)
		}
	}
	stored, err := x.storedIDs(ctx, ids)
	if err != nil {
		return res, err
	}
	var fresh []*task.Task
	var freshIdx []int
	seen := map[task.ID]bool{}
	for i, t := range ts {
		if stored[t.ID] || seen[t.ID] {
			res.Existing++
			continue
		}
		seen[t.ID] = true
		fresh = append(fresh, t)
		freshIdx = append(freshIdx, i)
	}
	if len(fresh) == 0 {
		return res, nil
	}
	rs, err := x.p.create(ctx, fresh)
	if err != nil {
		return res, fmt.Errorf("store tasks: %w", err)
	}
	for j, r := range rs { // those created are mirrored and tracked by the create's write
		t, i := fresh[j], freshIdx[j]
		if !r.Created {
			res.Taken = append(res.Taken, TakenKey{ID: given[i], App: t.App, Key: t.Key, Holder: r.Task.ID})
			continue
		}
		res.Imported++
	}
	return res, nil
}

// storedIDs reports which of ids (distinct) the store has, in one read:
// an UpdateMany whose fn writes nothing.
func (x *Transfer) storedIDs(ctx context.Context, ids []task.ID) (map[task.ID]bool, error) {
	_, errs := x.p.tasks.UpdateMany(ctx, ids, nil, func(ts []*task.Task) []error {
		skip := make([]error, len(ts))
		for i, t := range ts {
			if t != nil { // a task not stored is the store's ErrNotFound
				skip[i] = errSkip
			}
		}
		return skip
	})
	out := make(map[task.ID]bool, len(ids))
	for i, err := range errs {
		switch {
		case errors.Is(err, errSkip):
			out[ids[i]] = true
		case errors.Is(err, store.ErrNotFound):
		default:
			return nil, fmt.Errorf("look up task %s: %w", ids[i], err)
		}
	}
	return out, nil
}

// checkImport checks t as a create is checked, and that its state and
// times agree; fills what the engine derives (retry defaults, WakeAt);
// and puts a delivering task back to scheduled (released), which released
// reports. Its id is kept.
func (x *Transfer) checkImport(t *task.Task, now time.Time) (released bool, err error) {
	if t.ID.IsZero() {
		return false, &task.FieldError{Field: "id", Message: "is required"}
	}
	if err := task.ValidateApp(t.App); err != nil {
		return false, err
	}
	if t.Key != "" {
		if err := task.ValidateKey(t.Key); err != nil {
			return false, err
		}
	}
	if t.Target.Kind() == "" {
		return false, &task.FieldError{Field: "target", Message: "is required"}
	}
	if err := x.p.rules.target(t.App, t.Target); err != nil {
		return false, err
	}
	if err := t.Retry.Validate(); err != nil {
		return false, err
	}
	t.Retry = t.Retry.WithDefaults()
	if err := x.p.rules.payload(t.App, len(t.Payload)); err != nil {
		return false, err
	}
	if err := checkImportRecord(t); err != nil {
		return false, err
	}
	ms := func(p *time.Time) {
		if p != nil {
			*p = task.Ms(*p)
		}
	}
	for _, p := range []*time.Time{&t.DueAt, &t.NextAttemptAt, &t.CreatedAt, &t.UpdatedAt, t.Deadline, t.FinishedAt} {
		ms(p)
	}
	for i := range t.History {
		t.History[i].At = task.Ms(t.History[i].At)
	}

	switch {
	case t.State == task.Delivering:
		// The attempt under way on the source is made again here.
		t.Record(now, "released", t.Attempts, "moved to another server by an import while being delivered")
		t.Attempts = max(t.Attempts-1, 0)
		requeue(t, now, now)
		released = true
	case t.State == task.Scheduled:
		t.Lease, t.LeaseExpiresAt = "", nil
		t.WakeAt = wakeFor(t)
	default: // final
		t.Lease, t.LeaseExpiresAt = "", nil
		t.WakeAt = time.Time{}
	}
	return released, nil
}

// checkImportRecord checks the fields of an imported task that a create
// does not have: its state, times, attempts and history.
func checkImportRecord(t *task.Task) error {
	bad := func(field, format string, args ...any) error {
		return &task.FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case !t.State.Valid():
		return bad("state", "must be one of %v, got %q", task.States, t.State)
	case t.Attempts < 0 || t.Attempts > task.MaxMaxAttempts:
		return bad("attempts", "must be between 0 and %d", task.MaxMaxAttempts)
	case t.DueAt.IsZero():
		return bad("due_at", "is required")
	case t.NextAttemptAt.IsZero():
		return bad("next_attempt_at", "is required")
	case t.CreatedAt.IsZero():
		return bad("created_at", "is required")
	case t.UpdatedAt.IsZero():
		return bad("updated_at", "is required")
	case t.State.Final() && t.FinishedAt == nil:
		return bad("finished_at", "is required for a %s task", t.State)
	case !t.State.Final() && t.FinishedAt != nil:
		return bad("finished_at", "must be absent for a %s task", t.State)
	case t.UpdatedAt.Before(t.CreatedAt):
		return bad("updated_at", "is before created_at")
	case t.FinishedAt != nil && t.FinishedAt.Before(t.CreatedAt):
		return bad("finished_at", "is before created_at")
	case t.Deadline != nil && t.Deadline.Before(t.DueAt):
		return bad("deadline", "is before the due time")
	case len(t.LastError) > maxImportText:
		return bad("last_error", "is longer than %d bytes", maxImportText)
	case len(t.History) > task.MaxHistory:
		return bad("history", "has %d events, more than %d", len(t.History), task.MaxHistory)
	}
	for i, ev := range t.History {
		switch {
		case ev.At.IsZero():
			return bad(fmt.Sprintf("history.%d.at", i), "is required")
		case ev.What == "" || len(ev.What) > 32:
			return bad(fmt.Sprintf("history.%d.what", i), "must be 1 to 32 bytes")
		case ev.Attempt < 0 || ev.Attempt > task.MaxMaxAttempts:
			return bad(fmt.Sprintf("history.%d.attempt", i), "must be between 0 and %d", task.MaxMaxAttempts)
		case len(ev.Error) > maxImportText:
			return bad(fmt.Sprintf("history.%d.error", i), "is longer than %d bytes", maxImportText)
		}
	}
	return nil
}

// # Schedules
//
// An export ends with the schedules (ExportSchedules), in their API form,
// after the tasks: an import that reads the stream in order stores every
// occurrence (with its ScheduleID) before its schedule, so that the
// schedule's first step finds its pending occurrence there rather than
// making another under a new id.
//
// ImportSchedules stores schedules as they were: id, key, rule, times,
// state, template. It is idempotent as Import is: a schedule stored under
// its id is left alone. An active schedule is stored to be stepped at once
// (WakeAt now), as a create is: the step keeps the pending occurrence at
// NextAt that the import brought, makes it when the import did not, and
// makes what is due when NextAt passed during the move. An every-rule
// counts from NextAt (the API form has no anchor; NextAt is on the rule's
// grid), so the times go on as they were.

// ExportSchedules calls emit with every schedule of app (of every app
// when app is ""), app by app in name order, in id order within each. It
// stops at emit's first error, or ctx's, and returns it with the number of
// schedules emitted before. A store without schedules has none to export.
func (x *Transfer) ExportSchedules(ctx context.Context, app string, emit func(*task.Schedule) error) (int, error) {
	ss := x.p.schedules
	if ss == nil {
		return 0, nil
	}
	apps := []string{app}
	if app == "" {
		counts, err := ss.CountSchedules(ctx)
		if err != nil {
			return 0, fmt.Errorf("count the store's schedules: %w", err)
		}
		apps = slices.Sorted(maps.Keys(counts))
	}
	n := 0
	for _, app := range apps {
		var after task.ID
		for {
			if err := ctx.Err(); err != nil {
				return n, err
			}
			page, err := ss.ListSchedules(ctx, app, after, schedulePage)
			if err != nil {
				return n, fmt.Errorf("list schedules of app %s: %w", app, err)
			}
			for _, s := range page {
				if err := emit(s); err != nil {
					return n, err
				}
				n++
			}
			if len(page) < schedulePage {
				break
			}
			after = page[len(page)-1].ID
		}
	}
	return n, nil
}

// ScheduleImportResult is what ImportSchedules did.
type ScheduleImportResult struct {
	Imported int        // schedules stored
	Existing int        // already stored under their id, or repeated in the call
	Taken    []TakenKey // not stored: another schedule holds their app and key
}

// ImportSchedules stores ss (at most MaxBatch), as exported by another
// server; see the top of this section. An error is an *ImportError (its
// Schedule set) for a schedule refused, before anything is stored, or the
// call's.
func (x *Transfer) ImportSchedules(ctx context.Context, ss []*task.Schedule) (ScheduleImportResult, error) {
	var res ScheduleImportResult
	if err := x.p.ready(); err != nil {
		return res, err
	}
	st := x.p.schedules
	if st == nil {
		return res, ErrNoSchedules
	}
	if len(ss) > MaxBatch {
		return res, &task.FieldError{Field: "schedules", Message: fmt.Sprintf("has %d schedules, more than %d", len(ss), MaxBatch)}
	}
	now := x.p.now()
	for i, s := range ss {
		if err := x.checkScheduleImport(s, now); err != nil {
			return res, &ImportError{Index: i, ID: s.ID, Err: err, Schedule: true}
		}
	}
	select {
	case importing <- struct{}{}:
		defer func() { <-importing }()
	case <-ctx.Done():
		return res, ctx.Err()
	}
	seen := map[task.ID]bool{}
	var step []*task.Schedule
	for _, s := range ss {
		if seen[s.ID] {
			res.Existing++
			continue
		}
		seen[s.ID] = true
		switch _, err := st.GetSchedule(ctx, s.ID); {
		case err == nil:
			res.Existing++
			continue
		case !errors.Is(err, store.ErrNotFound):
			return res, fmt.Errorf("look up schedule %s: %w", s.ID, err)
		}
		got, created, err := st.CreateSchedule(ctx, s)
		if err != nil {
			return res, fmt.Errorf("store schedule %s: %w", s.ID, err)
		}
		if !created {
			res.Taken = append(res.Taken, TakenKey{ID: s.ID, App: s.App, Key: s.Key, Holder: got.ID})
			continue
		}
		res.Imported++
		if got.State == task.ScheduleActive {
			step = append(step, got)
		}
	}
	for _, s := range step {
		x.p.stepNow(ctx, s, 0) // its occurrences take creates like the loop's
	}
	return res, nil
}

// checkScheduleImport checks s as a create checks a schedule, and that its
// state and times agree, and fills what the API form leaves out (Anchor,
// WakeAt, Made).
func (x *Transfer) checkScheduleImport(s *task.Schedule, now time.Time) error {
	bad := func(field, format string, args ...any) error {
		return &task.FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
	}
	if s.ID.IsZero() {
		return bad("id", "is required")
	}
	if err := task.ValidateApp(s.App); err != nil {
		return err
	}
	s.Timezone = cmp.Or(s.Timezone, "UTC")
	s.CatchUp = cmp.Or(s.CatchUp, task.CatchUpOne)
	for _, p := range []*time.Time{s.StartAt, s.EndAt, s.NextAt, s.LastAt, &s.CreatedAt, &s.UpdatedAt} {
		if p != nil {
			*p = task.Ms(*p)
		}
	}
	s.Anchor = s.CreatedAt
	switch {
	case s.NextAt != nil:
		s.Anchor = *s.NextAt
	case s.StartAt != nil:
		s.Anchor = *s.StartAt
	}
	if err := recur.Check(s); err != nil {
		return err
	}
	if err := x.p.rules.checkTemplate(s, false); err != nil {
		return err
	}
	switch {
	case !slices.Contains(task.ScheduleStates, s.State):
		return bad("state", "must be one of %v, got %q", task.ScheduleStates, s.State)
	case s.CreatedAt.IsZero():
		return bad("created_at", "is required")
	case s.UpdatedAt.IsZero():
		return bad("updated_at", "is required")
	case s.UpdatedAt.Before(s.CreatedAt):
		return bad("updated_at", "is before created_at")
	case s.State == task.ScheduleActive && s.NextAt == nil:
		return bad("next_at", "is required for an active schedule")
	case s.State != task.ScheduleActive && s.NextAt != nil:
		return bad("next_at", "must be absent for a %s schedule", s.State)
	}
	s.Made, s.WakeAt = nil, time.Time{}
	if s.NextAt != nil {
		next := *s.NextAt
		s.Made, s.WakeAt = &next, now // the pending occurrence came with the import (or the step makes it)
	}
	return nil
}
