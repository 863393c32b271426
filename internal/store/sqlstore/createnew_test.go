package sqlstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/toc-dev/toc/internal/store/sqlstore"
	"github.com/toc-dev/toc/task"
)

// TestCreateGatheredOneStatement: the creates of several requests the
// engine gathers into one write (here 2 500 keyed tasks, more than a
// multi-table statement's 1 000 rows) are one plain INSERT on PostgreSQL,
// not a transaction of INSERT ... ON CONFLICT chunks (with a bound of 1 000
// rows, as before, CreateInOneStatement is false); on either server they
// are all stored. MySQL has no such statement and inserts in chunks.
func TestCreateGatheredOneStatement(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			s := open(t, sv.databases(t, 1))
			defer s.Close()
			ctx := context.Background()
			var gen task.IDGenerator
			ts := make([]*task.Task, 2500)
			for i := range ts {
				ts[i] = newTask(s, &gen, "app", fmt.Sprintf("k%d", i), epoch)
			}
			one, err := sqlstore.CreateInOneStatement(s, ts)
			if err != nil {
				t.Fatal(err)
			}
			if want := sv.name == "postgres"; one != want {
				t.Errorf("%d tasks in one statement: %v, want %v", len(ts), one, want)
			}
			res, err := s.Create(ctx, ts)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if !r.Created || r.Task.ID != ts[i].ID {
					t.Fatalf("task %d: created %v, id %v, want %v", i, r.Created, r.Task.ID, ts[i].ID)
				}
			}
			for _, i := range []int{0, 1234, 2499} {
				got, err := s.GetByKey(ctx, "app", ts[i].Key)
				if err != nil || got.ID != ts[i].ID {
					t.Fatalf("GetByKey %q: %v, %v", ts[i].Key, got, err)
				}
			}
		})
	}
}
