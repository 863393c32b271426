package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

func testClose(t *testing.T, b *bundle) {
	a := b.newTask("app", time.Minute, withKey("k"))
	b.create(t, a)
	if err := b.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	calls := map[string]func() error{
		"Create": func() error {
			_, err := b.s.Create(b.ctx, []*task.Task{b.newTask("app", time.Minute)})
			return err
		},
		"Get": func() error { _, err := b.s.Get(b.ctx, a.ID); return err },
		"GetByKey": func() error {
			_, err := b.s.GetByKey(b.ctx, "app", "k")
			return err
		},
		"Update": func() error {
			_, err := b.s.Update(b.ctx, a.ID, nil, func(*task.Task) error {
				t.Error("Update called fn after Close")
				return nil
			})
			return err
		},
		"UpdateMany": func() error {
			_, errs := b.s.UpdateMany(b.ctx, []task.ID{a.ID}, nil, func([]*task.Task) []error {
				t.Error("UpdateMany called fn after Close")
				return nil
			})
			return errors.Join(errs...)
		},
		"Wakeups": func() error {
			_, err := b.s.Wakeups(b.ctx, store.Cursor{}, farFuture, 10)
			return err
		},
		"Claimable": func() error {
			_, err := b.s.Claimable(b.ctx, "app", farFuture, 10)
			return err
		},
		"List": func() error {
			_, err := b.s.List(b.ctx, "app", task.Scheduled, task.ID{}, 10)
			return err
		},
		"Sweep": func() error { _, err := b.s.Sweep(b.ctx, farFuture, 10); return err },
		"Close": b.s.Close,
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: error = %v, want ErrClosed", name, err)
		}
	}
}

// testCloseDuringUpdates closes the store while Updates, UpdateManys and
// reads run: nothing may panic, and every call that fails must fail with
// ErrClosed.
func testCloseDuringUpdates(t *testing.T, b *bundle) {
	var ts []*task.Task
	for range 8 {
		ts = append(ts, b.newTask("app", time.Minute, withPull))
	}
	b.create(t, ts...)

	const workers = 16
	var (
		wg      sync.WaitGroup
		started atomic.Int32
		ready   = make(chan struct{})
	)
	for i := range workers {
		wg.Go(func() {
			arrive := sync.OnceFunc(func() {
				if started.Add(1) == workers {
					close(ready)
				}
			})
			defer arrive() // don't leave the closer waiting if we stop early
			for n := 0; ; n++ {
				var err error
				switch n % 5 {
				case 0, 1:
					_, err = b.s.Update(b.ctx, ts[(i+n)%len(ts)].ID, nil, func(t *task.Task) error {
						t.Attempts++
						t.WakeAt = t.WakeAt.Add(time.Millisecond)
						return nil
					})
				case 2:
					_, err = b.s.Wakeups(b.ctx, store.Cursor{}, farFuture, 10)
				case 3:
					_, err = b.s.List(b.ctx, "app", task.Scheduled, task.ID{}, 10)
				case 4:
					_, errs := b.s.UpdateMany(b.ctx, []task.ID{ts[(i+n)%len(ts)].ID, ts[(i+n+1)%len(ts)].ID}, nil,
						func(xs []*task.Task) []error {
							for _, x := range xs {
								if x != nil { // nil only with an error: checked below
									x.Attempts++
								}
							}
							return make([]error, len(xs))
						})
					err = errors.Join(errs...)
				}
				if err != nil {
					if !errors.Is(err, store.ErrClosed) {
						t.Errorf("error during Close = %v, want ErrClosed", err)
					}
					return
				}
				if n == 4 {
					arrive()
				}
			}
		})
	}
	<-ready // every worker is running
	if err := b.s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wg.Wait()
}
