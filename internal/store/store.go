// Package store defines the seam between toc's engine and the place tasks are
// kept. Every backend runs the same conformance suite (package storetest),
// which is what allows an interface this wide.
//
// A store keeps tasks and three orders over them: by wake time (the engine's
// timetable), by next attempt per app for pull tasks (what a claim may take),
// and by id per app and state (listing). It knows nothing of the state
// machine: the engine decides every transition inside [Store.Update], and the
// store keeps its indexes in step with the task it is handed back.
package store

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/toc-dev/toc/task"
)

// Errors a store returns. Wrap them with %w; compare with errors.Is.
var (
	ErrNotFound = errors.New("toc: task not found")
	ErrClosed   = errors.New("toc: store closed")
	// ErrConflict is an UpdateMany with UpdateOpts.Optimistic that found
	// the task changed between its read and its write: nothing was
	// written for it.
	ErrConflict = errors.New("toc: task changed meanwhile")
	// ErrUnavailable marks an error of a store over the network that a
	// later call, on a new connection, may not meet: the connection was
	// lost, the server restarted or is starting, refused a connection. The
	// write it failed may or may not have been stored (a commit whose
	// answer was lost).
	ErrUnavailable = errors.New("toc: database unavailable")
	// ErrDiskFull is a write refused or failed for lack of disk space:
	// nothing of it was stored. The store takes writes again by itself
	// once space is freed.
	ErrDiskFull = errors.New("toc: disk full: nothing was stored")
)

// Store keeps tasks durably. All methods are safe for concurrent use.
//
// Durability: when Create or Update returns without error, the write is on
// disk (fsync'd or committed); concurrent calls may share one sync.
type Store interface {
	// Create stores new tasks in one durable write. A task whose (App, Key)
	// already belongs to a stored task (live or finished and not yet swept)
	// is not stored; its result carries the existing task and Created false.
	// So does a later task of the same batch repeating an earlier one's key.
	// Tasks without a key are always created. The engine fills every field,
	// ID included. Results are in the order of tasks. The caller hands the
	// tasks over: a backend may normalize them in place and return them as
	// the results of the tasks created, so the caller must not change them
	// during or after the call.
	Create(ctx context.Context, tasks []*task.Task) ([]CreateResult, error)

	// Get returns the task with this id, or ErrNotFound.
	Get(ctx context.Context, id task.ID) (*task.Task, error)

	// GetByKey returns the task of app with this key, or ErrNotFound.
	GetByKey(ctx context.Context, app, key string) (*task.Task, error)

	// Update reads the task, calls fn with a copy, and stores what fn left in
	// it, all atomically with respect to other Updates of the same task. If
	// fn returns an error nothing is written and Update returns that error
	// unchanged (with the task as read). fn must not change ID, App or Key,
	// and must not call the store. Returns the task as stored. opts may be
	// nil.
	Update(ctx context.Context, id task.ID, opts *UpdateOpts, fn func(*task.Task) error) (*task.Task, error)

	// UpdateMany is Update for many tasks in as few writes and round trips
	// as the backend allows: the engine fires the tasks that come due
	// together with one call. ids must be distinct. It reads each task, calls
	// fn once with copies of them all in the order of ids (nil for a task
	// that is not stored), and stores each task whose entry in fn's result
	// (same length as ts) is nil, with the checks of Update. Each task's
	// write is atomic with respect to other Updates and UpdateManys of that
	// task, as in Update; the batch as a whole need not be atomic. fn runs
	// with every task of the batch held, must not change ID, App or Key and
	// must not call the store. It returns, in the order of ids, each task as
	// stored (as read when its error is non-nil; nil when not stored) and
	// each task's error: fn's own, unchanged; ErrNotFound, wrapped, for a
	// task not stored; or what kept its write from being stored.
	UpdateMany(ctx context.Context, ids []task.ID, opts *UpdateOpts, fn func(ts []*task.Task) []error) ([]*task.Task, []error)
	// Wakeups returns up to limit tasks with a non-zero WakeAt <= until that
	// come after the cursor in (WakeAt, ID) order, in that order.
	Wakeups(ctx context.Context, after Cursor, until time.Time, limit int) ([]Wakeup, error)

	// Claimable returns the ids of up to limit scheduled tasks of app with a
	// pull target and NextAttemptAt <= now, in (NextAttemptAt, ID) order.
	Claimable(ctx context.Context, app string, now time.Time, limit int) ([]task.ID, error)

	// List returns up to limit tasks of app in state with an id greater than
	// after (all when after is zero), in id order.
	List(ctx context.Context, app string, state task.State, after task.ID, limit int) ([]*task.Task, error)

	// Sweep deletes up to limit tasks in a final state whose FinishedAt is
	// before cutoff, freeing their keys, and returns how many it deleted.
	Sweep(ctx context.Context, cutoff time.Time, limit int) (int, error)

	// Close releases the store. Calls after Close return ErrClosed.
	Close() error
}

// Counter is an optional interface of a Store: how many tasks each app has
// in each state (the states without tasks left out). It reads an index entry
// per stored task, so it costs time in proportion to the store: callers
// cache the answer rather than ask on every request.
type Counter interface {
	Counts(ctx context.Context) (map[string]map[task.State]int64, error)
}

// Checkpointer is an optional interface of a Store that keeps its tasks in
// files of its own (pebblestore): a consistent copy of the whole store, for
// a backup. Stores in a database server (sqlstore) leave backups to the
// server's own tools.
type Checkpointer interface {
	// Checkpoint writes to w a tar stream of a store directory holding
	// every write whose call returned before Checkpoint was called, synced
	// or not, and nothing half written: opened as a store, it is the store
	// as of one instant. Writes go on meanwhile. The stream's last entry
	// is a [BackupManifest] that counts the files before it, so that a
	// reader can tell a whole stream from one cut short. It returns the
	// manifest. A store makes one checkpoint at a time; a second call
	// waits for the first.
	Checkpoint(ctx context.Context, w io.Writer) (BackupManifest, error)
}

// BackupManifestName is the name of the last entry of a checkpoint's tar
// stream, a [BackupManifest] in JSON.
const BackupManifestName = "toc-backup.json"

// BackupManifest describes a checkpoint: the entries of its stream before
// the manifest itself.
type BackupManifest struct {
	// Files is the number of regular files.
	Files int `json:"files"`
	// Bytes is their total size.
	Bytes int64 `json:"bytes"`
	// TakenAt is when the checkpoint was made.
	TakenAt time.Time `json:"taken_at"`
}

// AttemptLog is an optional interface of a Store that the engine of one
// process has alone (pebblestore): a log of the push attempts it started.
// A push attempt is stored only at its outcome; the log is what lets a
// process restarted after a crash count the attempts that had none. A note
// is handed to the operating system before NoteAttempts returns, without an
// fsync: a process killed loses none, a machine crash may lose the last
// ones.
type AttemptLog interface {
	// NoteAttempts appends that attempt ns[i] of ids[i] started.
	NoteAttempts(ctx context.Context, ids []task.ID, ns []int) error
	// NotedAttempts returns the highest attempt noted of each task.
	NotedAttempts(ctx context.Context) (map[task.ID]int, error)
	// RestartAttemptLog starts the log over with the attempts that under
	// returns (the ones under way), with no note in between: it calls
	// under, then makes every write made before durable (so the outcomes
	// of the attempts left out are), then replaces the log. under runs
	// with the log locked and must not call the store. It must be called
	// once before the first NoteAttempts of a process.
	RestartAttemptLog(ctx context.Context, under func() ([]task.ID, []int)) error
}

// Sharded is an optional interface of a Store whose tasks live in numbered
// shards, each task in the one its id names ([task.ID.Shard], modulo
// Shards()): sqlstore. The engine gives a new task an id naming a shard
// below Shards(), and a keyed task the shard of its key (see sqlstore's
// ShardFor); a task imported with another id is kept under it. Other
// stores keep a task under any id.
type Sharded interface {
	Shards() int
}

// CreateWriters is an optional interface of a Store that says how many
// Create calls the engine should have in flight at once. The engine
// gathers the creates of concurrent requests into its next Create call
// (a group commit); a store that group-commits its own log, like Pebble,
// does best with one call at a time: the next call then takes every
// request that came during the previous one's sync, and each sync serves
// them all, instead of a second call entering early with the few that
// came first and costing a sync of its own. Without it the engine keeps
// two in flight, so that one gathers while the other commits (a SQL
// transaction's round trips).
type CreateWriters interface {
	CreateWriters() int
}

// Wrapper is implemented by a Store that wraps another (metrics do), so
// that [As] finds the optional interfaces of the store underneath.
type Wrapper interface {
	Unwrap() Store
}

// As returns the first store in s's chain of [Wrapper]s, s included, that
// implements T.
func As[T any](s Store) (T, bool) {
	for s != nil {
		if t, ok := s.(T); ok {
			return t, true
		}
		w, ok := s.(Wrapper)
		if !ok {
			break
		}
		s = w.Unwrap()
	}
	var zero T
	return zero, false
}

// UpdateOpts are per-call options of Update.
type UpdateOpts struct {
	// NoSync lets Update return before its write is synced to disk. The
	// write is still atomic and ordered before any later write; a process
	// crash keeps it, a machine crash may lose it (and anything after it
	// up to the next synced write). The engine uses it for the writes of
	// the delivery path, where a lost write means a redelivery, which
	// at-least-once allows; never for an answer given to a client.
	NoSync bool
	// Optimistic lets UpdateMany read without locking the rows: each task
	// fn changed is then written only if it is still as read, and a task
	// that changed meanwhile gets ErrConflict (nothing written for it)
	// instead of waiting for the other writer's lock. fn still runs once.
	// A store that locks anyway (in process) never returns ErrConflict.
	// The engine uses it for the fire path's writes, where a row changed
	// under it is rare and handled by trying again.
	Optimistic bool
	// Shared is for an UpdateMany whose fn changes few of the tasks it is
	// given: fn gets the tasks as stored, which may be the store's own
	// copies, shared with its other readers, and must not change them. To
	// write one, fn puts a changed copy of its own in the slice in its
	// place (ts[i] = c, c a deep copy: Task.Clone) and returns nil for it;
	// the store then owns c (fn keeps no pointer to it). A nil error with
	// the entry left as given writes the task unchanged. The tasks
	// UpdateMany returns are then shared too: read them, never change
	// them. It spares a copy of every task read, and of every task written
	// as it is handed back.
	Shared bool
}

// SharedTasks reports whether o asks for shared tasks (UpdateOpts.Shared).
func (o *UpdateOpts) SharedTasks() bool { return o != nil && o.Shared }

// KnownUpdater is a store that writes tasks over versions its caller
// knows are the ones stored, without reading them again: UpdateKnown is
// UpdateMany (with Shared: see UpdateOpts) over olds, the tasks as stored,
// which the caller read earlier and keeps. fn runs, as UpdateMany's, under
// the tasks' row locks, and is where the caller checks that each of olds
// is still the version stored (its own fence: the store does not look,
// beyond what it knows at no cost); a task it cannot vouch for it leaves
// out with an error of its own, and reads it the usual way. A wrong old
// corrupts the store's indexes: only a process through which every write
// of the task goes can vouch for it (the engine on one node).
type KnownUpdater interface {
	UpdateKnown(ctx context.Context, olds []*task.Task, opts *UpdateOpts, fn func(ts []*task.Task) []error) ([]*task.Task, []error)
}

// WaitingClaimer is a store that finds apart the pull tasks waiting for a
// claim unwoken: ClaimableWaiting is Claimable of the tasks whose WakeAt
// is not their NextAttemptAt (to the millisecond; zero, or their
// deadline's), those that the engine on one node claims from the store:
// its wheel brings the others due to its ready queue, and a store claim
// leaves them (pebblestore, whose index holds those alone).
type WaitingClaimer interface {
	ClaimableWaiting(ctx context.Context, app string, now time.Time, limit int) ([]task.ID, error)
}

// CreateResult is what Create did with one task.
type CreateResult struct {
	Task    *task.Task // the stored task: the new one, or the one that had the key
	Created bool
}

// Cursor is a position in the wake-time order. The zero Cursor is before
// everything.
type Cursor struct {
	At time.Time // a WakeAt; compared at millisecond precision
	ID task.ID
}

// Less reports whether c is before o.
func (c Cursor) Less(o Cursor) bool {
	a, b := c.At.UnixMilli(), o.At.UnixMilli()
	if c.At.IsZero() {
		a = -1 << 62
	}
	if o.At.IsZero() {
		b = -1 << 62
	}
	if a != b {
		return a < b
	}
	return string(c.ID[:]) < string(o.ID[:])
}

// Wakeup is one entry of the wake-time order.
type Wakeup struct {
	ID    task.ID
	At    time.Time  // the task's WakeAt
	State task.State // Scheduled or Delivering
	Kind  string     // the target kind: task.Target.Kind()
	// App and Key are filled by stores that have them at hand (App: the
	// engine's fair turns between apps, package sched; sqlstore's shard
	// scans, for the cluster's promotion to Redis); others may leave them
	// empty.
	App, Key string
}

// Schedules is an optional interface of a Store that also keeps schedules
// (recurring timers, [task.Schedule]): every backend of toc implements it,
// and storetest's RunSchedules is its conformance suite. A schedule is
// small and written only when it is changed or makes an occurrence, so a
// store may keep it in a simple form (record.EncodeSchedule).
//
// A store keeps schedules in two orders besides their ids: per app by id
// (listing), and by WakeAt over every app for those with a non-zero WakeAt
// (what the engine must act on next). A sharded store keeps a schedule in
// the shard its id names, as for a task.
type Schedules interface {
	// CreateSchedule stores s durably, unless (s.App, s.Key) already names
	// a schedule: then nothing is stored and it returns that schedule and
	// false.
	CreateSchedule(ctx context.Context, s *task.Schedule) (*task.Schedule, bool, error)
	// GetSchedule returns the schedule with this id, or ErrNotFound.
	GetSchedule(ctx context.Context, id task.ID) (*task.Schedule, error)
	// GetScheduleByKey returns app's schedule with this key, or ErrNotFound.
	GetScheduleByKey(ctx context.Context, app, key string) (*task.Schedule, error)
	// ListSchedules returns up to limit schedules of app with an id greater
	// than after (all when after is zero), in id order.
	ListSchedules(ctx context.Context, app string, after task.ID, limit int) ([]*task.Schedule, error)
	// UpdateSchedule reads the schedule, calls fn with a copy and durably
	// stores what fn left in it, atomically with respect to other updates
	// and deletes of that schedule. If fn returns an error nothing is
	// written and UpdateSchedule returns that error unchanged. fn must not
	// change ID, App or Key and must not call the store. Returns the
	// schedule as stored, or ErrNotFound.
	UpdateSchedule(ctx context.Context, id task.ID, fn func(*task.Schedule) error) (*task.Schedule, error)
	// DeleteSchedule removes the schedule durably, freeing its key, or
	// returns ErrNotFound.
	DeleteSchedule(ctx context.Context, id task.ID) error
	// DueSchedules returns up to limit schedules with a non-zero WakeAt <=
	// until, in (WakeAt, ID) order.
	DueSchedules(ctx context.Context, until time.Time, limit int) ([]*task.Schedule, error)
	// CountSchedules returns how many schedules each app has in each state
	// (the states without schedules left out).
	CountSchedules(ctx context.Context) (map[string]map[task.ScheduleState]int64, error)
	// CountAppSchedules returns how many schedules app has (in any state),
	// counting no further than limit: limit means limit or more. The
	// engine checks an app's max_schedules with it.
	CountAppSchedules(ctx context.Context, app string, limit int) (int, error)
}
