package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// TestUpdateKnown: UpdateKnown writes over the versions its caller read
// without reading them again, and leaves a task written meanwhile (by
// another node, say) as it is, returning ErrConflict for it; on MySQL,
// which has no fenced write, it reads the rows as UpdateMany does.
func TestUpdateKnown(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			s := open(t, sv.databases(t, 2))
			defer s.Close()
			ctx := context.Background()
			var gen task.IDGenerator
			var ts []*task.Task
			var ids []task.ID
			for i := range 12 {
				tk := newTask(s, &gen, "app", fmt.Sprintf("k%d", i), epoch)
				if i%2 == 0 {
					tk.Key = "" // keyless ones too
				}
				ts, ids = append(ts, tk), append(ids, tk.ID)
			}
			if _, err := s.Create(ctx, ts); err != nil {
				t.Fatal(err)
			}
			opts := &store.UpdateOpts{NoSync: true, Optimistic: true, Shared: true}
			// The caller's read: the versions it knows.
			olds, errs := s.UpdateMany(ctx, ids, opts, func(xs []*task.Task) []error {
				errs := make([]error, len(xs))
				for i := range errs {
					errs[i] = errSkipped
				}
				return errs
			})
			for i, err := range errs {
				if !errors.Is(err, errSkipped) || olds[i] == nil {
					t.Fatalf("read %d: %v, %v", i, olds[i], err)
				}
			}
			// Another writer changes task 3 meanwhile.
			if _, err := s.Update(ctx, ids[3], nil, func(x *task.Task) error {
				x.Payload = []byte(`{"n":2}`)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			got, errs := s.UpdateKnown(ctx, olds, opts, func(xs []*task.Task) []error {
				for i, x := range xs {
					c := x.Clone()
					c.State = task.Delivered
					c.WakeAt = time.Time{}
					fin := epoch.Add(time.Second)
					c.FinishedAt = &fin
					xs[i] = c
				}
				return make([]error, len(xs))
			})
			for i, id := range ids {
				stored, err := s.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if i == 3 && sv.name == "postgres" {
					if !errors.Is(errs[i], store.ErrConflict) || stored.State != task.Scheduled || string(stored.Payload) != `{"n":2}` {
						t.Errorf("task changed meanwhile: %v, stored %s %s; want ErrConflict and the other write kept", errs[i], stored.State, stored.Payload)
					}
					continue
				}
				if errs[i] != nil || got[i] == nil || got[i].State != task.Delivered || stored.State != task.Delivered {
					t.Errorf("task %d: %v, %v; stored %s", i, got[i], errs[i], stored.State)
				}
				if i == 3 && string(stored.Payload) != `{"n":2}` {
					t.Errorf("task 3 (read again): payload %s, want the other write's", stored.Payload)
				}
			}
		})
	}
}

var errSkipped = errors.New("skip")
