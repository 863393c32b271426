package httpsink

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Pushes to one receiver run at most a limit at once, the rest waiting for
// a slot (connLimit), the apps in turn (one app's burst does not hold up
// another's pushes to the same receiver): as many connections as the receiver's
// latency needs for the rate pushes come at, and no more. Measured with
// toc bench on a 2-core machine, a receiver on the same host, 64-byte
// payloads: 64 connections carry POSTs back to back at 28–35 µs of CPU each
// (client and receiver), 512 at 45–53 µs, and a burst of 100 000 pushes
// spread over the 512 attempts an app may have in flight cost 91 µs of
// CPU per fire instead of 74 over 64 connections. Fewer goroutines
// runnable also leave the API's requests a shorter wait for a CPU.
//
// The limit follows Little's law: the pushes that arrive per second times
// the receiver's average answer time lately, four times over, at least
// MinConnsPerHost and at most MaxIdleConnsPerHost: four times the
// connections the pushes of the last windows kept busy. A slow receiver
// thus gets the connections its latency needs (100 ms at 5 000 pushes a
// second: all of them) within a few windows, and so does one whose
// answers are mostly slow and sometimes fast (a cache in front of it); a
// fast one keeps the minimum. What the limit bounds is a sudden jump
// within a window: a pause of this process (a collection, a flush) after
// which every due push would otherwise open its own connection at once.
// (An earlier version sized it by the shortest answer time, which also
// held back a CPU-bound burst here, but left a receiver whose answers
// are mostly 50 times slower than its fastest at the minimum, its pushes
// queueing in this process.)
//
// Little's law alone cannot tell a receiver that waits (on a disk, on
// another service: more connections, more answers a second) from one
// that is out of CPU (more connections, longer answers, no more of
// them): for the second, four times the connections in use is always
// more, and a burst ran the limit up to its maximum within a few windows,
// spending CPU on connections that only queued. So the limit grows at
// most twofold a window, and each growth is a probe: the window after it
// compares the answer time with the one before. When the answers got
// slower nearly as much as the connections grew (fewer than half of the
// added connections' answers came on top: probeGain), the growth is
// taken back and the limit does not grow for probeHold; then it probes
// again, in case the receiver has changed. (A growth while no push
// waited for a slot changes nothing yet, and is not judged.) Measured as
// above, a burst of 100 000, receiver on the host, load under 1.3, 2
// pairs each: Little's law alone 103–123 µs of CPU per fire, 15 600–18 200
// drained a second; with probes 88–94 µs, 20 600–21 800/s; the limit held
// at 64, 84–100 µs, 19 200–23 000/s. The limit starts at the minimum, and
// reaches the maximum in a few windows where that pays.
const (
	// MinConnsPerHostDefault is [Config.MinConnsPerHost]'s default.
	MinConnsPerHostDefault = 64
	// limitWindow is how often a limit is sized again, from the pushes
	// that arrived and the answer times seen in the last two windows.
	limitWindow = 100 * time.Millisecond
	// limitHeadroom is how many times Little's law's figure the limit is.
	limitHeadroom = 4
	// probeGain is the share of a growth's added connections whose answers
	// must come on top of the ones before for the growth to stay.
	probeGain = 0.5
	// probeHold is how long the limit does not grow after a probe that
	// did not pay.
	probeHold = 30 * limitWindow
)

// connLimits holds the limit of each receiver (scheme and host).
type connLimits struct {
	min, max int
	mu       sync.Mutex
	by       map[string]*connLimit
}

// maxConnLimits is how many receivers' limits connLimits keeps before it
// forgets the idle ones (a target cached with a forgotten limit keeps
// using it, on its own).
const maxConnLimits = 4096

// of returns the limit of the receiver key, made on first use.
func (ls *connLimits) of(key string) *connLimit {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok := ls.by[key]
	if !ok {
		if ls.by == nil {
			ls.by = make(map[string]*connLimit)
		}
		if len(ls.by) >= maxConnLimits {
			for k, x := range ls.by {
				if x.idle() {
					delete(ls.by, k)
				}
			}
		}
		l = &connLimit{min: ls.min, max: ls.max, limit: ls.min}
		ls.by[key] = l
	}
	return l
}

// connLimit bounds the pushes under way to one receiver.
type connLimit struct {
	min, max int

	mu       sync.Mutex
	limit    int
	inFlight int
	waiting  fairQueue // pushes waiting for a slot, by app; a closed channel holds a slot handed to it

	winStart time.Time // the current window's start
	arrived  int       // pushes that asked for a slot in the current window
	// The answer times in the current window and in the one before: their
	// sum and count.
	winSum, lastSum time.Duration
	winN, lastN     int

	waited bool // a push waited for a slot in the current window

	// The probe under way: the limit before the last growth (0: none)
	// and the average answer time of the window before it.
	probeFrom int
	probeLat  time.Duration
	holdUntil time.Time // no growth before it: the last probe did not pay
}

// idle reports whether no push is under way or waiting.
func (l *connLimit) idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight == 0 && l.waiting.n == 0
}

// acquire waits for a slot for a push of app, or for ctx to end (its
// error).
func (l *connLimit) acquire(ctx context.Context, app string) error {
	l.mu.Lock()
	l.arrived++
	l.resizeLocked(time.Now())
	if l.inFlight < l.limit && l.waiting.n == 0 {
		l.inFlight++
		l.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	l.waited = true
	l.waiting.push(app, ch)
	l.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.waiting.remove(app, ch) {
			return ctx.Err()
		}
		// The slot was handed over meanwhile: pass it on.
		l.releaseLocked()
		return ctx.Err()
	}
}

// release gives back a slot; took is the push's answer time (0: no
// answer, not counted).
func (l *connLimit) release(took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if took > 0 {
		l.winSum += took
		l.winN++
	}
	l.releaseLocked()
}

// releaseLocked hands the slot to the first push waiting, or frees it.
func (l *connLimit) releaseLocked() {
	if l.waiting.n > 0 && l.inFlight <= l.limit {
		close(l.waiting.pop())
		return
	}
	l.inFlight--
}

// resizeLocked sizes the limit again once a window has passed, and hands
// the slots a larger limit frees to the pushes waiting.
func (l *connLimit) resizeLocked(now time.Time) {
	since := now.Sub(l.winStart)
	if since < limitWindow {
		return
	}
	if n := l.winN + l.lastN; n > 0 && since < 2*limitWindow {
		l.limit = l.sizeLocked(now, since, (l.winSum+l.lastSum)/time.Duration(n))
	} else {
		l.probeFrom = 0 // no answers to judge it by, or an idle gap
	}
	l.winStart, l.arrived, l.waited = now, 0, false
	l.lastSum, l.lastN, l.winSum, l.winN = l.winSum, l.winN, 0, 0
	for l.waiting.n > 0 && l.inFlight < l.limit {
		l.inFlight++
		close(l.waiting.pop())
	}
}

// sizeLocked returns the limit for the next window, given the last
// windows' average answer time lat over since; the window that ends is
// the first at the current limit when a probe is under way.
func (l *connLimit) sizeLocked(now time.Time, since, lat time.Duration) int {
	if from := l.probeFrom; from > 0 {
		l.probeFrom = 0
		if l.winN > 0 && l.probeLat > 0 {
			grew := float64(l.limit) / float64(from)
			slower := float64(l.winSum/time.Duration(l.winN)) / float64(l.probeLat)
			// Answers a second scale as connections over answer time.
			if grew/slower < 1+probeGain*(grew-1) {
				l.holdUntil = now.Add(probeHold)
				return from
			}
		}
	}
	perSec := float64(l.arrived) / since.Seconds()
	need := max(int(perSec*lat.Seconds()*limitHeadroom)+1, l.min)
	if need <= l.limit {
		return need
	}
	if l.limit >= l.max || now.Before(l.holdUntil) {
		return l.limit
	}
	if l.waited && l.winN > 0 {
		// Pushes waited: the growth will raise the pushes under way, and
		// the next window tells whether that paid.
		l.probeFrom, l.probeLat = l.limit, l.winSum/time.Duration(l.winN)
	}
	return min(need, 2*l.limit, l.max)
}

// fairQueue holds the pushes waiting for a slot, each app's in arrival
// order, popped by the apps in turn.
type fairQueue struct {
	by   map[string][]chan struct{} // by app, non-empty
	ring []string                   // the apps in by, in turn order
	turn int                        // ring[turn] goes next
	n    int                        // pushes waiting in all
}

func (q *fairQueue) push(app string, ch chan struct{}) {
	if q.by == nil {
		q.by = make(map[string][]chan struct{})
	}
	w, ok := q.by[app]
	if !ok {
		// Joins the turns last: just before the app whose turn it is.
		q.ring = slices.Insert(q.ring, q.turn, app)
		if len(q.ring) > 1 {
			q.turn++
		}
	}
	q.by[app] = append(w, ch)
	q.n++
}

// pop returns the next app's oldest push; q is not empty.
func (q *fairQueue) pop() chan struct{} {
	app := q.ring[q.turn]
	w := q.by[app]
	ch := w[0]
	w[0] = nil
	if w = w[1:]; len(w) == 0 {
		q.dropApp(app)
	} else {
		q.by[app] = w
		q.turn++
	}
	if q.turn >= len(q.ring) {
		q.turn = 0
	}
	q.n--
	return ch
}

// remove takes ch out of app's pushes; false when it is not there (it was
// popped).
func (q *fairQueue) remove(app string, ch chan struct{}) bool {
	w := q.by[app]
	i := slices.Index(w, ch)
	if i < 0 {
		return false
	}
	if w = slices.Delete(w, i, i+1); len(w) == 0 {
		q.dropApp(app)
		if q.turn >= len(q.ring) {
			q.turn = 0
		}
	} else {
		q.by[app] = w
	}
	q.n--
	return true
}

// dropApp takes app, which has no push left, out of the turns.
func (q *fairQueue) dropApp(app string) {
	delete(q.by, app)
	i := slices.Index(q.ring, app)
	q.ring = slices.Delete(q.ring, i, i+1)
	if i < q.turn {
		q.turn--
	}
}
