package sqlstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/toc-dev/toc/internal/store"
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

// TestCreateByCopy: on PostgreSQL a create of copyMinRows tasks or more
// whose keys are free goes by COPY (fewer, and on MySQL, by INSERT), and
// stores them all; one of them whose key is taken fails the COPY as a
// whole, and the create then finds the key's holder and stores the rest.
func TestCreateByCopy(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			s := open(t, sv.databases(t, 1))
			defer s.Close()
			n := sqlstore.CopyMinRows + 200
			if got, want := sqlstore.CreateByCopy(s, n), sv.name == "postgres"; got != want {
				t.Errorf("%d tasks by COPY: %v, want %v", n, got, want)
			}
			if sqlstore.CreateByCopy(s, sqlstore.CopyMinRows-1) {
				t.Errorf("%d tasks by COPY", sqlstore.CopyMinRows-1)
			}

			ctx := context.Background()
			var gen task.IDGenerator
			batch := func(prefix string) []*task.Task {
				ts := make([]*task.Task, n)
				for i := range ts {
					key := fmt.Sprintf("%s%d", prefix, i)
					if i%5 == 0 {
						key = "" // keyless ones among them
					}
					ts[i] = newTask(s, &gen, "app", key, epoch)
				}
				return ts
			}
			check := func(ts []*task.Task, res []store.CreateResult, holder map[int]task.ID) {
				t.Helper()
				for i, r := range res {
					want, taken := holder[i]
					if !taken {
						want = ts[i].ID
					}
					if r.Created == taken || r.Task.ID != want {
						t.Fatalf("task %d: created %v, id %v, want %v", i, r.Created, r.Task.ID, want)
					}
					got, err := s.Get(ctx, want)
					if err != nil || got.ID != want {
						t.Fatalf("Get task %d: %v, %v", i, got, err)
					}
				}
			}
			first := batch("a")
			res, err := s.Create(ctx, first)
			if err != nil {
				t.Fatal(err)
			}
			check(first, res, nil)

			second := batch("b")
			second[7].Key = first[7].Key
			res, err = s.Create(ctx, second)
			if err != nil {
				t.Fatal(err)
			}
			check(second, res, map[int]task.ID{7: first[7].ID})
		})
	}
}
