package engine

import (
	"context"
	"time"

	"github.com/toc-dev/toc/task"
)

// admission decides when a due push task of an app may start an attempt,
// under the app's deliveries_per_second and max_in_flight. The fire
// pipeline consults it before the store is read (isRated, pace: a rated
// app's task waits for its rate, or for its gate), with the row held
// (admit: an in-flight slot), and tells it what became of each admitted
// task (release, dropGrant, kickParked). It hands the tasks it held back
// to the workers through the timekeeper's enqueue.
//
// New chooses one of two, once:
//   - on one node, localAdmission (admitlocal.go): the limits hold per
//     process, with rate reservations taken before the store read and an
//     in-flight cap of at most three quarters of the workers;
//   - in a cluster (Config.Limiter), clusterAdmission (gate.go): an
//     app's rate and explicit max_in_flight hold across the nodes, asked
//     of the shared Limiter by a gate per app, and the node keeps its own
//     in-flight cap besides.
//
// The two differ on purpose where the modes do (which apps are paced
// before the store read, and what EffectivePolicy says of MaxInFlight);
// each keeps the semantics it had before the split.
type admission interface {
	// start gives the admission its lifetime: what it runs (the gates)
	// runs until ctx ends. stop starts nothing more and waits for what
	// runs, which ends with start's ctx.
	start(ctx context.Context)
	stop()

	// isRated reports, without a lock, whether app's due tasks must be
	// paced before their store read.
	isRated(app string) bool
	// pace paces a rated app's due task before its store read: gated, it
	// left the fire job (its gate sends it back when the cluster's limits
	// allow); otherwise at is when it may come back (zero: go on now).
	pace(app string, id task.ID, now time.Time) (gated bool, at time.Time)
	// admit decides whether a due push task may start an attempt now. On
	// admitNow it has taken an in-flight slot, which release gives back.
	admit(app string, id task.ID, now time.Time) (admitted, time.Time)
	// enterGate queues a task admit sent to its app's gate (admitGate).
	enterGate(app string, id task.ID)
	// release gives back an admitted task's in-flight slot (and its
	// cluster slot) and sends a parked task to try for it.
	release(app string, id task.ID)
	// dropGrant forgets the gate's pass of a task that fire did not use
	// (it needed no attempt after all), and gives back its cluster slot.
	dropGrant(app string, id task.ID)
	// kickParked sends parked tasks of app to try for the free slots:
	// called when a task that fired took no slot, so a free slot is never
	// left idle while tasks wait for one.
	kickParked(app string)
	// slotFreed hears that one of app's cluster slots was given back.
	slotFreed(app string)
	// room says how many more of app's due tasks the fire path should
	// take from the ready queues now, before their store read (bounded
	// false: no bound). Params.Freed hears when an app has room again.
	room(app string) (n int, bounded bool)
	// taking counts n of app's tasks into (n < 0: out of) the fire jobs
	// under way, taken for the room there was and not yet done with: the
	// pump counts them in when it takes them, the fire job out when it
	// ends, so that two jobs do not both take the same room.
	taking(app string, n int)

	// policiesChanged applies the policies in force (Policy) to the
	// apps' limits in place: tasks waiting for a slot or a rate keep
	// waiting under the new limits, and none is dropped.
	policiesChanged()
	// inFlightCap is what EffectivePolicy says of p's MaxInFlight.
	inFlightCap(p AppPolicy) int
	// counts returns app's push attempts under way in this process and
	// tasks parked for a slot.
	counts(app string) (inFlight, parked int)
}

// admitted is admit's decision.
type admitted int

const (
	admitNow   admitted = iota
	admitLater          // wait for a rate reservation: retry at the returned time
	admitPark           // at the in-flight cap: parked until a slot frees
	admitGate           // cluster limits: queue behind the app's gate
)

// admissionParams is what both admissions are made of.
type admissionParams struct {
	Policy  func(app string) AppPolicy       // the policy in force (apps.of): read without a lock
	Shares  shares                           // the node's in-flight caps
	Enqueue func(app string, ids ...task.ID) // hands tasks held back to the workers (timekeeper.enqueue)
	Freed   func()                           // an app has room for its due tasks again (timekeeper.roomFreed); nil: none
}

// InFlight returns app's push attempts under way and tasks parked for a
// slot (tests, metrics).
func (e *Engine) InFlight(app string) (inFlight, parked int) { return e.admit.counts(app) }
