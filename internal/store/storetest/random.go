package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// testRandom runs a seeded random sequence of creates, updates (one by one
// and many at once) and sweeps against the store and a map, checking that
// they agree.
func testRandom(t *testing.T, b *bundle) {
	const seed = 20300601
	r := rand.New(rand.NewPCG(seed, seed))
	var (
		model   = map[task.ID]*task.Task{}
		keys    = map[[2]string]task.ID{}
		created []task.ID // every id ever created, swept ones included
	)
	apps := []string{"a", "b", "c"}
	// at is a time near now, often sharing a millisecond with others.
	at := func() time.Time {
		return b.now.Add(time.Duration(r.IntN(20)-10)*time.Second + time.Duration(r.IntN(3))*time.Millisecond)
	}
	stored := func() []*task.Task {
		out := make([]*task.Task, 0, len(model))
		for _, t := range model {
			out = append(out, t)
		}
		return out
	}
	errNo := errors.New("no")
	// randomChange returns a random change of a task, and whether fn
	// refuses it.
	randomChange := func() (func(*task.Task), bool) {
		switch r.IntN(8) {
		case 0:
			return delivering(at()), false
		case 1:
			next := at()
			return func(t *task.Task) {
				t.State = task.Scheduled
				t.Lease, t.LeaseExpiresAt = "", nil
				t.NextAttemptAt, t.WakeAt = next, next
			}, false
		case 2:
			return finished(task.States[2+r.IntN(4)], at()), false
		case 3:
			return withWake(at()), false
		case 4:
			return withWake(time.Time{}), false
		case 5:
			return withNext(at()), false
		case 6:
			if r.IntN(2) == 0 {
				return withPull, false
			}
			return withHTTP, false
		default:
			return withWake(at()), true
		}
	}

	for op := range 600 {
		switch n := r.IntN(20); {
		case n < 5: // create
			var batch []*task.Task
			var want []store.CreateResult
			for range 1 + r.IntN(4) {
				var opts []func(*task.Task)
				if r.IntN(2) == 0 {
					opts = append(opts, withKey(fmt.Sprintf("key-%d", r.IntN(8))))
				}
				if r.IntN(2) == 0 {
					opts = append(opts, withPull)
				}
				nt := b.newTask(apps[r.IntN(len(apps))], time.Duration(r.IntN(20)-10)*time.Second, opts...)
				batch = append(batch, nt)
				if nt.Key != "" {
					if id, ok := keys[[2]string{nt.App, nt.Key}]; ok {
						want = append(want, store.CreateResult{Task: model[id]})
						continue
					}
					keys[[2]string{nt.App, nt.Key}] = nt.ID
				}
				model[nt.ID] = nt.Clone()
				created = append(created, nt.ID)
				want = append(want, store.CreateResult{Task: nt, Created: true})
			}
			got, err := b.s.Create(b.ctx, batch)
			if err != nil {
				t.Fatalf("op %d: Create: %v", op, err)
			}
			if d := diff(want, got); d != "" {
				t.Fatalf("op %d: Create (-want +got):\n%s", op, d)
			}

		case n < 14: // update
			if len(created) == 0 {
				continue
			}
			id := created[r.IntN(len(created))]
			change, fail := randomChange()
			got, err := b.s.Update(b.ctx, id, nil, func(t *task.Task) error {
				change(t)
				if fail {
					return errNo
				}
				return nil
			})
			old, ok := model[id]
			switch {
			case !ok:
				if !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("op %d: Update(swept) error = %v, want ErrNotFound", op, err)
				}
				continue
			case fail:
				if err != errNo {
					t.Fatalf("op %d: Update error = %v, want fn's", op, err)
				}
				continue
			case err != nil:
				t.Fatalf("op %d: Update: %v", op, err)
			}
			want := apply(old, change)
			if d := diff(want, got); d != "" {
				t.Fatalf("op %d: Update (-want +got):\n%s", op, d)
			}
			model[id] = want

		case n < 17: // update many, swept tasks among them
			if len(created) == 0 {
				continue
			}
			perm := r.Perm(len(created))[:1+r.IntN(min(6, len(created)))]
			batch := make([]task.ID, len(perm))
			changes := make([]func(*task.Task), len(perm))
			fails := make([]bool, len(perm))
			for i, k := range perm {
				batch[i] = created[k]
				changes[i], fails[i] = randomChange()
			}
			got, errs := b.s.UpdateMany(b.ctx, batch, nil, func(ts []*task.Task) []error {
				out := make([]error, len(ts))
				for i, x := range ts {
					if _, ok := model[batch[i]]; ok != (x != nil) {
						t.Errorf("op %d: fn got %v for task %s, stored: %v", op, x, batch[i], ok)
					}
					if x == nil {
						continue
					}
					changes[i](x)
					if fails[i] {
						out[i] = errNo
					}
				}
				return out
			})
			for i, id := range batch {
				old, ok := model[id]
				switch {
				case !ok:
					if !errors.Is(errs[i], store.ErrNotFound) {
						t.Fatalf("op %d: UpdateMany(swept) error = %v, want ErrNotFound", op, errs[i])
					}
				case fails[i]:
					if errs[i] != errNo {
						t.Fatalf("op %d: UpdateMany error = %v, want fn's", op, errs[i])
					}
				case errs[i] != nil:
					t.Fatalf("op %d: UpdateMany: %v", op, errs[i])
				default:
					want := apply(old, changes[i])
					if d := diff(want, got[i]); d != "" {
						t.Fatalf("op %d: UpdateMany (-want +got):\n%s", op, d)
					}
					model[id] = want
				}
			}

		case n < 19: // sweep everything finished before a cutoff
			cutoff := at()
			want := 0
			for id, t := range model {
				if t.State.Final() && t.FinishedAt != nil && t.FinishedAt.UnixMilli() < cutoff.UnixMilli() {
					delete(model, id)
					if t.Key != "" {
						delete(keys, [2]string{t.App, t.Key})
					}
					want++
				}
			}
			got, err := b.s.Sweep(b.ctx, cutoff, 1<<20)
			if err != nil || got != want {
				t.Fatalf("op %d: Sweep = %d, %v; want %d", op, got, err, want)
			}

		default:
			check(t, b, stored())
			if t.Failed() {
				t.Fatalf("op %d: store and model differ", op)
			}
		}
	}
	check(t, b, stored())
}
