package engine

import (
	"slices"
	"testing"

	"github.com/toc-dev/toc/task"
)

func TestShares(t *testing.T) {
	s := sharesOf(64)
	for _, tt := range []struct {
		explicit, node, pol int
	}{
		{pol: 0, explicit: 32, node: 32},      // half of the workers by default
		{pol: -1, explicit: 32, node: 32},     // a negative cap is no cap given
		{pol: 10, explicit: 10, node: 10},     // an explicit cap below the node's most
		{pol: 1000, explicit: 1000, node: 48}, // three quarters of the workers at most
	} {
		p := AppPolicy{MaxInFlight: tt.pol}
		if got := s.explicit(p); got != tt.explicit {
			t.Errorf("explicit(%d) = %d, want %d", tt.pol, got, tt.explicit)
		}
		if got := s.node(p); got != tt.node {
			t.Errorf("node(%d) = %d, want %d", tt.pol, got, tt.node)
		}
	}
	if s := sharesOf(1); s.def != 1 || s.max != 1 {
		t.Errorf("one worker: %+v, want a share of 1", s)
	}
}

// TestAppSlots: a released slot sends one parked task to fire again, and
// unparkFree as many as there are free slots, in the order they parked.
func TestAppSlots(t *testing.T) {
	ids := make([]task.ID, 5)
	for i := range ids {
		ids[i][15] = byte(i + 1)
	}
	s := appSlots{max: 2}
	s.inFlight = 2
	if !s.full() {
		t.Fatal("2 of 2 under way: not full")
	}
	for _, id := range ids {
		s.park(id)
	}
	if got := s.release(); !slices.Equal(got, ids[:1]) {
		t.Fatalf("release sent %v, want the first parked", got)
	}
	if got := s.release(); !slices.Equal(got, ids[1:2]) {
		t.Fatalf("release sent %v, want the second parked", got)
	}
	if s.inFlight != 0 {
		t.Fatalf("in flight %d after two releases, want 0", s.inFlight)
	}
	if got := s.unparkFree(); !slices.Equal(got, ids[2:4]) {
		t.Fatalf("unparkFree sent %v, want two (the free slots)", got)
	}
	s.inFlight = 2
	if got := s.release(); !slices.Equal(got, ids[4:]) {
		t.Fatalf("release sent %v, want the last parked", got)
	}
	s.max = 0 // a reload lowered the cap below what is under way
	if got := s.release(); got != nil || s.inFlight != 0 {
		t.Fatalf("release over the cap sent %v (in flight %d), want none", got, s.inFlight)
	}
	if got := s.unparkFree(); got != nil {
		t.Fatalf("unparkFree with no free slot sent %v", got)
	}
}

// TestReadRoom: an app below its cap may take every free slot, up to the
// cap, whatever tasks its fire jobs are taking meanwhile; once its
// attempts fill the cap, none until hold slots are free again. (With the
// hold applied from the start, TestBatchedWrites hung one run in ten: its
// last tasks were never read while its attempts waited for them.)
func TestReadRoom(t *testing.T) {
	s := appSlots{max: 512}
	for _, tt := range []struct {
		inFlight, taking, want int
	}{
		{0, 0, 512},
		{493, 0, 19},  // below the hold, never saturated: all of it
		{400, 112, 0}, // taken, being admitted: no room, but not saturated
		{493, 0, 19},  // so the rest is there once they are admitted
		{512, 0, 0},   // the cap filled
		{510, 0, 0},   // 2 free: under the hold (32)
		{480, 0, 32},  // the hold free again
		{500, 0, 12},  // and the rest up to the cap
		{512, 0, 0},   // the cap again
		{0, 0, 512},   // nothing under way: all of it
	} {
		s.inFlight, s.taking = tt.inFlight, tt.taking
		if got := s.readRoom(); got != tt.want {
			t.Errorf("%d in flight, %d taking: room %d, want %d", tt.inFlight, tt.taking, got, tt.want)
		}
	}
}
