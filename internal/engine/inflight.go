package engine

import "github.com/toc-dev/toc/task"

// shares are the node's in-flight caps per app, from Config.MaxInFlight:
// an app whose policy gives no MaxInFlight has half of the workers, and no
// app more than three quarters of them, so that one app whose endpoint
// hangs can never take every delivery slot.
type shares struct {
	def int // an app's cap when its policy gives none
	max int // the most any app holds on this node
}

func sharesOf(maxInFlight int) shares {
	return shares{def: max(1, maxInFlight/2), max: max(1, maxInFlight-maxInFlight/4)}
}

// explicit is p's MaxInFlight, or the default share when it gives none.
func (s shares) explicit(p AppPolicy) int {
	if p.MaxInFlight <= 0 {
		return s.def
	}
	return p.MaxInFlight
}

// node is p's cap on this node: the other apps keep a quarter of the
// workers whatever p says.
func (s shares) node(p AppPolicy) int { return min(s.explicit(p), s.max) }

// appSlots counts one app's push attempts under way in this process
// against its node cap, and keeps the due tasks that found the cap full
// (parked) until a slot frees. It has no lock: the admission that holds
// it guards it with its own.
type appSlots struct {
	max       int // the node cap (shares.node)
	inFlight  int
	taking    int       // taken by fire jobs under way, not yet done with (localAdmission.taking)
	saturated bool      // its room ran out, and has not come back to hold since (readRoom)
	parked    []task.ID // due, waiting for a slot; sent to fire again when one frees
}

// full reports whether no attempt may start.
func (s *appSlots) full() bool { return s.inFlight >= s.max }

// room is how many more tasks the fire path should take now: the free
// slots less the tasks fire jobs took and are still deciding. (The parked
// tasks a slot frees for are sent back to the ready queue, where they
// count among the tasks taken for it.)
func (s *appSlots) room() int { return max(s.max-s.inFlight-s.taking, 0) }

// readRoom is room for the fire path's take: once the app's attempts have
// filled its cap, none until hold slots are free again, so that a
// saturated app's tasks are read in batches rather than one by one as
// each slot frees. Before that, all of it, up to the cap: with the hold
// applied from the start, an app whose last few due tasks fell in its top
// hold slots waited for attempts to end that may wait for those tasks.
// (Tasks being taken count against the room but do not saturate: they are
// counted twice while their job admits them.)
func (s *appSlots) readRoom() int {
	r := s.room()
	switch {
	case s.inFlight >= s.max:
		s.saturated = true
	case r >= s.hold() || s.inFlight == 0:
		s.saturated = false
	}
	if s.saturated {
		return 0
	}
	return r
}

// hold is the room a saturated app waits for before more of its due
// tasks are read (localAdmission.room): roomHold, or less for a small cap.
func (s *appSlots) hold() int { return max(1, min(roomHold, s.max/4)) }

// roomHold is the most a saturated app's hold is: its tasks are then read
// by fire jobs of about this many (fireBatchMax at most).
const roomHold = 32

// park keeps id until a slot frees.
func (s *appSlots) park(id task.ID) { s.parked = append(s.parked, id) }

// release gives back a slot and returns the parked task (at most one) to
// send to fire again. No slot is held on its behalf: it is admitted (or
// parked again) like any other when it fires, so a task that turns out to
// need no attempt (done by another node, cancelled) cannot leak a slot.
func (s *appSlots) release() []task.ID {
	s.inFlight--
	if len(s.parked) == 0 || s.full() {
		return nil
	}
	return s.unpark(1)
}

// unparkFree returns as many parked tasks as there are free slots, to send
// to fire again.
func (s *appSlots) unparkFree() []task.ID { return s.unpark(s.max - s.inFlight) }

func (s *appSlots) unpark(n int) []task.ID {
	n = min(n, len(s.parked))
	if n <= 0 {
		return nil
	}
	next := append([]task.ID(nil), s.parked[:n]...)
	clear(s.parked[:n])
	s.parked = s.parked[n:]
	return next
}
