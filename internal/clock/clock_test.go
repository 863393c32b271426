package clock

import (
	"errors"
	"testing"
	"time"
)

func TestTestClockStandsStillAndNeverGoesBack(t *testing.T) {
	start := time.Date(2027, 3, 14, 9, 0, 0, 0, time.UTC)
	c := NewTest(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now() = %s, want %s", got, start)
	}
	time.Sleep(2 * time.Millisecond) // wall time passes; the clock does not
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("after wall time passed, Now() = %s, want %s", got, start)
	}
	if err := c.Advance(30 * time.Minute); err != nil {
		t.Fatal(err)
	}
	if want := start.Add(30 * time.Minute); !c.Now().Equal(want) {
		t.Fatalf("after Advance(30m), Now() = %s, want %s", c.Now(), want)
	}
	if err := c.Set(start); !errors.Is(err, ErrBackwards) {
		t.Fatalf("Set back: err = %v, want ErrBackwards", err)
	}
	if err := c.Advance(-time.Second); !errors.Is(err, ErrBackwards) {
		t.Fatalf("Advance(-1s): err = %v, want ErrBackwards", err)
	}
	if err := c.Set(c.Now()); err != nil {
		t.Fatalf("Set to its own time: %v", err)
	}
	if got := NewTest(start.Add(1234567 * time.Nanosecond)).Now(); !got.Equal(start.Add(time.Millisecond)) {
		t.Errorf("NewTest between milliseconds reads %s, want %s", got, start.Add(time.Millisecond))
	}
}

func TestOrIsTheWallClock(t *testing.T) {
	before := time.Now()
	got := Or(nil).Now()
	if got.Before(before) || got.Sub(before) > time.Minute {
		t.Fatalf("Or(nil).Now() = %s, want about %s", got, before)
	}
	tc := NewTest(before)
	if Or(tc) != Clock(tc) {
		t.Fatal("Or(c) is not c")
	}
}
