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

// TestUpdateManyDatabaseFailure: when one database fails an UpdateMany, in
// its write or in its read, only its tasks fail; the other database's are
// written.
func TestUpdateManyDatabaseFailure(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			dsns := sv.databases(t, 2)
			s := open(t, dsns)
			defer s.Close()
			ctx := context.Background()
			var gen task.IDGenerator
			var ts []*task.Task
			var ids []task.ID
			inDB1 := map[task.ID]bool{}
			for i := range 16 {
				tk := newTask(s, &gen, "app", fmt.Sprintf("k%d", i), epoch)
				ts, ids = append(ts, tk), append(ids, tk.ID)
				inDB1[tk.ID] = int(tk.ID.Shard())/testTables == 1
			}
			if _, err := s.Create(ctx, ts); err != nil {
				t.Fatal(err)
			}
			refused, n1 := -1, 0 // a task of database 1 that fn refuses; how many it has
			for i, tk := range ts {
				if inDB1[tk.ID] {
					refused, n1 = i, n1+1
				}
			}
			if n1 < 2 || n1 == len(ts) {
				t.Fatalf("%d of the %d tasks in database 1: pick keys that spread", n1, len(ts))
			}
			sentinel := errors.New("engine says no")
			deliver := func(xs []*task.Task) []error {
				errs := make([]error, len(xs))
				for i, x := range xs {
					if x == nil {
						continue
					}
					x.State = task.Delivering
					x.WakeAt = x.WakeAt.Add(time.Minute)
					if i == refused {
						errs[i] = sentinel
					}
				}
				return errs
			}
			// check checks the tasks of database 0 were written, and those
			// of database 1 failed as failed says.
			check := func(what string, got []*task.Task, errs []error, failed func(i int) bool) {
				t.Helper()
				for i, tk := range ts {
					if inDB1[tk.ID] {
						if !failed(i) {
							t.Errorf("%s failure: task %d of database 1: %v, %v", what, i, got[i], errs[i])
						}
						continue
					}
					stored, err := s.Get(ctx, tk.ID)
					if err != nil {
						t.Fatal(err)
					}
					if errs[i] != nil || got[i] == nil || got[i].State != task.Delivering || stored.State != task.Delivering {
						t.Errorf("%s failure: task %d of database 0: %v, %v; stored %s", what, i, got[i], errs[i], stored.State)
					}
				}
			}

			// Database 1 refuses the writes.
			var stmts []string
			for table := range testTables {
				stmts = append(stmts, fmt.Sprintf("ALTER TABLE toc_tasks_%04d ADD CONSTRAINT not_delivering CHECK (state <> 2)", table))
			}
			if err := sv.execOn(t, dsns[1], stmts...); err != nil {
				t.Fatal(err)
			}
			got, errs := s.UpdateMany(ctx, ids, nil, deliver)
			check("write", got, errs, func(i int) bool {
				stored, err := s.Get(ctx, ids[i])
				if err != nil || stored.State != task.Scheduled {
					t.Errorf("task %d of database 1: %v, %v; want it as it was", i, stored, err)
				}
				if i == refused {
					return errs[i] == sentinel
				}
				// Returned as read.
				return errs[i] != nil && !errors.Is(errs[i], store.ErrNotFound) && got[i] != nil && got[i].State == task.Scheduled
			})

			// Database 1 can't be read: its tasks reach fn as nil.
			stmts = stmts[:0]
			for table := range testTables {
				stmts = append(stmts, fmt.Sprintf("DROP TABLE toc_tasks_%04d", table))
			}
			if err := sv.execOn(t, dsns[1], stmts...); err != nil {
				t.Fatal(err)
			}
			got, errs = s.UpdateMany(ctx, ids, nil, func(xs []*task.Task) []error {
				for i, x := range xs {
					if inDB1[ids[i]] != (x == nil) {
						t.Errorf("fn got %v for task %d", x, i)
					}
				}
				return deliver(xs)
			})
			check("read", got, errs, func(i int) bool {
				return errs[i] != nil && !errors.Is(errs[i], store.ErrNotFound) && got[i] == nil
			})
		})
	}
}
