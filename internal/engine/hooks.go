package engine

import (
	"time"

	"github.com/toc-dev/toc/task"
)

// Hooks are called as tasks move, so that metrics (or tests) can follow
// without the engine knowing about them, after Pebble's EventListener. Any
// field may be nil. Hooks run on the engine's goroutines: they must be quick
// and must not call the engine.
type Hooks struct {
	// Created is called with the number of tasks an app created in one call.
	Created func(app string, n int)
	// Finished is called when a task reaches a final state (delivered,
	// dead, expired, cancelled).
	Finished func(app string, state task.State)
	// AttemptStarted is called when a delivery attempt starts: a push
	// leased by the engine, or a pull task claimed. Lateness is the time
	// from the attempt's due time (NextAttemptAt) to its start.
	AttemptStarted func(app, kind string, lateness time.Duration)
	// AttemptEnded is called when a push attempt ends; err is nil on
	// success.
	AttemptEnded func(app, kind string, took time.Duration, err error)
	// OccurrencesCreated is called with the number of occurrences an
	// app's schedule newly stored in one write (not those found by their
	// key); Created counts them too, as tasks.
	OccurrencesCreated func(app string, n int)
	// ScheduleHeld is called when the app's creates_per_second holds back
	// occurrences a schedule's step was to make: they are made later,
	// late, keeping their due times.
	ScheduleHeld func(app string)
}

// written is a task as one write stored it, with the write's number: the
// writes of one engine are numbered under the task's store lock, so that
// track can tell a stale copy from a newer one when two writers finish in
// the other order (see package sched). 0 for a copy read back from storage.
type written struct {
	t   *task.Task
	seq uint64
}
