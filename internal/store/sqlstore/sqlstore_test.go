package sqlstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/sqlstore"
	"github.com/toc-dev/toc/internal/store/storetest"
	"github.com/toc-dev/toc/task"
)

// TestStore runs the conformance suite on each server, every subtest on a
// store of two fresh databases of four tables each.
func TestStore(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			storetest.Run(t, func(t *testing.T) store.Store { return open(t, sv.databases(t, 2)) })
		})
	}
}

// TestSchedules runs the schedules' conformance suite on each server, every
// subtest on a store of two fresh databases of four tables each.
func TestSchedules(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			storetest.RunSchedules(t, func(t *testing.T) store.Store { return open(t, sv.databases(t, 2)) })
		})
	}
}

// TestDurability reopens a store on the same databases: dir stands for a
// set of databases.
func TestDurability(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			var mu sync.Mutex
			dbs := map[string][]string{}
			storetest.RunDurability(t, func(t *testing.T, dir string) store.Store {
				mu.Lock()
				if dbs[dir] == nil {
					dbs[dir] = sv.databases(t, 2)
				}
				dsns := dbs[dir]
				mu.Unlock()
				return open(t, dsns)
			})
		})
	}
}

// newTask returns a task as the engine of a sharded store makes it: its id
// carries ShardFor's shard.
func newTask(s *sqlstore.Store, gen *task.IDGenerator, app, key string, due time.Time) *task.Task {
	t := &task.Task{
		ID:            gen.New(due, 0),
		App:           app,
		Key:           key,
		DueAt:         due,
		NextAttemptAt: due,
		Payload:       []byte(`{"n":1}`),
		Target:        task.Target{Pull: &task.PullTarget{}},
		Retry:         task.RetryPolicy{}.WithDefaults(),
		State:         task.Scheduled,
		CreatedAt:     due,
		UpdatedAt:     due,
		WakeAt:        due,
	}
	binary.BigEndian.PutUint16(t.ID[6:8], s.ShardFor(app, key, t.ID))
	return t
}

var epoch = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

// TestRouting checks that each task is stored in the table its id names
// (database shard/Tables, table shard%Tables), and nowhere else.
func TestRouting(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			dsns := sv.databases(t, 2)
			s := open(t, dsns)
			defer s.Close()
			var gen task.IDGenerator
			want := map[[2]int]int{} // (database, table) → tasks
			var ts []*task.Task
			for i := range 40 {
				key := ""
				if i%2 == 0 {
					key = fmt.Sprintf("k%d", i)
				}
				tk := newTask(s, &gen, "app", key, epoch)
				ts = append(ts, tk)
				sh := int(tk.ID.Shard())
				want[[2]int{sh / testTables, sh % testTables}]++
			}
			if _, err := s.Create(context.Background(), ts); err != nil {
				t.Fatal(err)
			}
			if len(want) < 4 {
				t.Errorf("40 tasks in only %d of 8 shards", len(want))
			}
			for db := range 2 {
				for table := range testTables {
					q := fmt.Sprintf("SELECT COUNT(*) FROM toc_tasks_%04d", table)
					if got := sv.queryInt(t, dsns[db], q); got != want[[2]int{db, table}] {
						t.Errorf("database %d table %d holds %d tasks, want %d", db, table, got, want[[2]int{db, table}])
					}
				}
			}
		})
	}
}

// TestScheduleRouting checks that each schedule is stored in the database
// its id names (shard/Tables), in that database's one toc_schedules table,
// and that one imported with an id naming another shard keeps it.
func TestScheduleRouting(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			dsns := sv.databases(t, 2)
			s := open(t, dsns)
			defer s.Close()
			ctx := context.Background()
			var gen task.IDGenerator
			mk := func(key string) *task.Schedule {
				sc := &task.Schedule{
					ID: gen.New(epoch, 0), App: "app", Key: key, Every: task.Duration(time.Minute),
					Timezone: "UTC", CatchUp: task.CatchUpOne, State: task.ScheduleActive,
					CreatedAt: epoch, UpdatedAt: epoch, Anchor: epoch, WakeAt: epoch,
					Target: task.Target{Pull: &task.PullTarget{}},
				}
				sc.ID = sc.ID.WithShard(s.ShardFor(sc.App, sc.Key, sc.ID))
				return sc
			}
			want := [2]int{}
			for i := range 20 {
				sc := mk(fmt.Sprintf("k%d", i))
				if _, created, err := s.CreateSchedule(ctx, sc); err != nil || !created {
					t.Fatalf("CreateSchedule: %v, %v", created, err)
				}
				want[int(sc.ID.Shard())/testTables]++
			}
			if want[0] == 0 || want[1] == 0 {
				t.Errorf("20 schedules all in one database: %v", want)
			}
			for db := range 2 {
				if got := sv.queryInt(t, dsns[db], "SELECT COUNT(*) FROM toc_schedules"); got != want[db] {
					t.Errorf("database %d holds %d schedules, want %d", db, got, want[db])
				}
			}

			// An imported schedule keeps its id, whatever shard it names:
			// another of its key's database, one the store lacks (modulo 8
			// it is one of the store's), one of the other database. It is
			// stored in its key's database, found by id and by key, updated
			// and deleted by id.
			for _, shift := range []uint16{1, 8, testTables} {
				sc := mk(fmt.Sprintf("moved-%d", shift))
				key := sc.ID.Shard()
				switch shift {
				case 1:
					sc.ID = sc.ID.WithShard(key/testTables*testTables + (key+1)%testTables)
				case 8:
					sc.ID = sc.ID.WithShard(key + 8)
				default:
					sc.ID = sc.ID.WithShard((key + testTables) % 8)
				}
				if _, created, err := s.CreateSchedule(ctx, sc); err != nil || !created {
					t.Fatalf("CreateSchedule(id of shard %d, key of shard %d): %v, %v", sc.ID.Shard(), key, created, err)
				}
				if got := sv.queryInt(t, dsns[int(key)/testTables], "SELECT COUNT(*) FROM toc_schedules WHERE schedule_key = '"+sc.Key+"'"); got != 1 {
					t.Errorf("schedule %s: %d rows in its key's database, want 1", sc.Key, got)
				}
				if got, err := s.GetSchedule(ctx, sc.ID); err != nil || got.ID != sc.ID {
					t.Errorf("GetSchedule(%s) = %v, %v", sc.ID, got, err)
				}
				if got, err := s.GetScheduleByKey(ctx, sc.App, sc.Key); err != nil || got.ID != sc.ID {
					t.Errorf("GetScheduleByKey(%s) = %v, %v", sc.Key, got, err)
				}
				if got, err := s.UpdateSchedule(ctx, sc.ID, func(c *task.Schedule) error { c.State = task.SchedulePaused; return nil }); err != nil || got.State != task.SchedulePaused {
					t.Errorf("UpdateSchedule(%s) = %v, %v", sc.ID, got, err)
				}
				if err := s.DeleteSchedule(ctx, sc.ID); err != nil {
					t.Errorf("DeleteSchedule(%s): %v", sc.ID, err)
				}
				if _, err := s.GetSchedule(ctx, sc.ID); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("GetSchedule(%s) after its delete: %v, want ErrNotFound", sc.ID, err)
				}
			}
			unknown := mk("never-stored")
			if _, err := s.GetSchedule(ctx, unknown.ID); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetSchedule(%s) error = %v, want ErrNotFound", unknown.ID, err)
			}
			if err := s.DeleteSchedule(ctx, unknown.ID); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("DeleteSchedule(%s) error = %v, want ErrNotFound", unknown.ID, err)
			}
			if _, err := s.UpdateSchedule(ctx, unknown.ID, func(*task.Schedule) error { return nil }); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("UpdateSchedule(%s) error = %v, want ErrNotFound", unknown.ID, err)
			}
		})
	}
}

// TestCreateKeepsImportedIDs stores tasks whose ids another server made
// (an import keeps them): a keyed task whose id names another shard than
// its key's, and tasks whose ids name shards the store lacks. Each is
// found, updated and listed by its id, found by its key, holds its key
// against a later create, is counted once, and frees its key when swept.
func TestCreateKeepsImportedIDs(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			dsns := sv.databases(t, 2)
			s := open(t, dsns)
			defer s.Close()
			ctx := context.Background()
			var gen task.IDGenerator
			keyed := newTask(s, &gen, "app", "k", epoch)
			keyShard := keyed.ID.Shard()
			keyed.ID = keyed.ID.WithShard((keyShard + 5) % 8) // another database, too
			farKeyed := newTask(s, &gen, "app", "far-k", epoch)
			farKeyed.ID = farKeyed.ID.WithShard(0) // as an embedded server makes them
			if s.ShardFor("app", "far-k", farKeyed.ID) == 0 {
				farKeyed.ID = farKeyed.ID.WithShard(1)
			}
			far := newTask(s, &gen, "app", "", epoch)
			far.ID = far.ID.WithShard(1000) // another cluster's, of more shards
			ts := []*task.Task{keyed, farKeyed, far}
			rs, err := s.Create(ctx, ts)
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			for i, r := range rs {
				if !r.Created || r.Task.ID != ts[i].ID {
					t.Errorf("Create(%s) = %s created %v", ts[i].ID, r.Task.ID, r.Created)
				}
			}
			for _, tk := range ts {
				if got, err := s.Get(ctx, tk.ID); err != nil || got.ID != tk.ID {
					t.Errorf("Get(%s) = %v, %v", tk.ID, got, err)
				}
				if tk.Key != "" {
					if got, err := s.GetByKey(ctx, tk.App, tk.Key); err != nil || got.ID != tk.ID {
						t.Errorf("GetByKey(%s) = %v, %v", tk.Key, got, err)
					}
				}
			}
			// The task is in its home table, its key claim in its key's.
			home := int(keyed.ID.Shard())
			if got := sv.queryInt(t, dsns[home/testTables], fmt.Sprintf("SELECT COUNT(*) FROM toc_tasks_%04d WHERE state <> 0", home%testTables)); got < 1 {
				t.Errorf("shard %d (the id's) holds %d tasks", home, got)
			}
			if got := sv.queryInt(t, dsns[int(keyShard)/testTables], fmt.Sprintf("SELECT COUNT(*) FROM toc_tasks_%04d WHERE state = 0", int(keyShard)%testTables)); got != 1 {
				t.Errorf("shard %d (the key's) holds %d key claims, want 1", keyShard, got)
			}
			// A create of the key (as the engine makes it) finds the task.
			again := newTask(s, &gen, "app", "k", epoch)
			rs, err = s.Create(ctx, []*task.Task{again})
			if err != nil {
				t.Fatal(err)
			}
			if rs[0].Created || rs[0].Task.ID != keyed.ID {
				t.Errorf("Create(the key again) = %s created %v; want %s, not created", rs[0].Task.ID, rs[0].Created, keyed.ID)
			}
			// Updates by id, one and many.
			done := epoch.Add(time.Second)
			finish := func(tk *task.Task) error {
				tk.State, tk.FinishedAt, tk.WakeAt = task.Delivered, &done, time.Time{}
				return nil
			}
			if _, err := s.Update(ctx, keyed.ID, nil, finish); err != nil {
				t.Errorf("Update(%s): %v", keyed.ID, err)
			}
			_, errs := s.UpdateMany(ctx, []task.ID{farKeyed.ID, far.ID}, nil, func(ts []*task.Task) []error {
				out := make([]error, len(ts))
				for i, tk := range ts {
					if tk == nil {
						out[i] = errors.New("not read")
						continue
					}
					out[i] = finish(tk)
				}
				return out
			})
			for i, err := range errs {
				if err != nil {
					t.Errorf("UpdateMany: task %d: %v", i, err)
				}
			}
			counts, err := s.Counts(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(map[string]map[task.State]int64{"app": {task.Delivered: 3}}, counts); diff != "" {
				t.Errorf("Counts (-want +got):\n%s", diff)
			}
			list, err := s.List(ctx, "app", task.Delivered, task.ID{}, 10)
			if err != nil || len(list) != 3 {
				t.Errorf("List(delivered) = %d tasks, %v; want 3", len(list), err)
			}
			// Swept, the task frees its key: a create of it is new.
			if n, err := s.Sweep(ctx, done.Add(time.Second), 10); err != nil || n != 3 {
				t.Fatalf("Sweep = %d, %v; want 3", n, err)
			}
			if _, err := s.GetByKey(ctx, "app", "k"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetByKey(swept) error = %v, want ErrNotFound", err)
			}
			fresh := newTask(s, &gen, "app", "k", epoch)
			if rs, err := s.Create(ctx, []*task.Task{fresh}); err != nil || !rs[0].Created || rs[0].Task.ID != fresh.ID {
				t.Errorf("Create(the key, its holder swept) = %+v, %v", rs, err)
			}
		})
	}
}

// TestUpdateNoSync checks that an Update and an UpdateMany with NoSync
// (synchronous_commit off on PostgreSQL, nothing on MySQL) store what they
// say.
func TestUpdateNoSync(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			s := open(t, sv.databases(t, 1))
			defer s.Close()
			ctx := context.Background()
			var gen task.IDGenerator
			tk := newTask(s, &gen, "app", "k", epoch)
			if _, err := s.Create(ctx, []*task.Task{tk}); err != nil {
				t.Fatal(err)
			}
			got, err := s.Update(ctx, tk.ID, &store.UpdateOpts{NoSync: true}, func(t *task.Task) error {
				t.Attempts = 7
				return nil
			})
			if err != nil || got.Attempts != 7 {
				t.Fatalf("Update(NoSync) = %v, %v", got, err)
			}
			again, err := s.Get(ctx, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("Get after Update(NoSync) (-updated +got):\n%s", diff)
			}

			other := newTask(s, &gen, "app", "other", epoch)
			if _, err := s.Create(ctx, []*task.Task{other}); err != nil {
				t.Fatal(err)
			}
			many, errs := s.UpdateMany(ctx, []task.ID{other.ID, tk.ID}, &store.UpdateOpts{NoSync: true}, func(ts []*task.Task) []error {
				for _, x := range ts {
					x.Attempts = 8
				}
				return make([]error, len(ts))
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("UpdateMany(NoSync): %v", err)
			}
			for _, x := range many {
				again, err := s.Get(ctx, x.ID)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(x, again); diff != "" || x.Attempts != 8 {
					t.Errorf("Get after UpdateMany(NoSync) (-updated +got):\n%s", diff)
				}
			}
		})
	}
}

// TestNoSyncRead: on PostgreSQL the read that starts an Update or an
// UpdateMany with NoSync, and the optimistic UpdateMany's multi-table write,
// turn synchronous_commit off for their transaction only.
func TestNoSyncRead(t *testing.T) {
	postgres.use(t)
	dsns := postgres.databases(t, 1)
	s := open(t, dsns)
	defer s.Close()
	ctx := context.Background()
	var gen task.IDGenerator
	tk := newTask(s, &gen, "app", "k", epoch)
	if _, err := s.Create(ctx, []*task.Task{tk}); err != nil {
		t.Fatal(err)
	}
	many, err := sqlstore.NoSyncManyReadSQL(s, tk.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	missing := gen.New(epoch, tk.ID.Shard())
	for _, tt := range []struct {
		name, sql string
		args      []any
	}{
		{"get_for_update_no_sync", sqlstore.NoSyncReadSQL(s, tk.ID), []any{tk.ID[:]}},
		{"get_many_for_update_no_sync", many, []any{[][]byte{missing[:], tk.ID[:]}}},
		// The fire path's fenced write, a transaction of its own (here
		// one row that is not stored: nothing written).
		{"update_many_fenced_tables", sqlstore.UpdateTablesFencedSQL(s, tk.ID), []any{
			[][]byte{missing[:]}, []int64{1}, []string{"http"}, []*int64{nil}, []int64{1}, []*int64{nil},
			[][]byte{{1}}, [][]byte{{1}}, []int64{0},
		}},
	} {
		if tt.sql == "" {
			t.Fatalf("the PostgreSQL dialect has no %s", tt.name)
		}
		conn, err := pgx.Connect(ctx, dsns[0])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		show := func() string {
			var v string
			if err := conn.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v); err != nil {
				t.Fatal(err)
			}
			return v
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, tt.sql, tt.args...)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if v := show(); v != "off" {
			t.Errorf("%s: synchronous_commit in the transaction = %q, want off", tt.name, v)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if v := show(); v != "on" {
			t.Errorf("%s: synchronous_commit after the transaction = %q, want on", tt.name, v)
		}
	}
}

// TestCreateConcurrentSameKey races Creates of one key from many
// goroutines: exactly one creates it, every other gets that task back.
func TestCreateConcurrentSameKey(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			s := open(t, sv.databases(t, 2))
			defer s.Close()
			ctx := context.Background()
			var gen task.IDGenerator
			const n = 16
			results := make([]store.CreateResult, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					// Two keys, in opposite orders half the time: the
					// transactions lock them in one order anyway.
					a := newTask(s, &gen, "app", "same", epoch)
					b := newTask(s, &gen, "app", "other", epoch)
					batch := []*task.Task{a, b}
					if i%2 == 1 {
						batch = []*task.Task{b, a}
					}
					res, err := s.Create(ctx, batch)
					if err != nil {
						t.Errorf("Create: %v", err)
						return
					}
					results[i] = res[i%2]
				})
			}
			wg.Wait()
			if t.Failed() {
				return // a Create failed: results has holes
			}
			created := 0
			for _, r := range results {
				if r.Created {
					created++
				}
				if r.Task == nil || r.Task.ID != results[0].Task.ID {
					t.Errorf("Create returned %v, want the one task with the key", r.Task)
				}
			}
			if created != 1 {
				t.Errorf("%d Creates created the key, want 1", created)
			}
		})
	}
}

// TestShardWakeups: the per-shard scans together give what Wakeups gives,
// each task from its own shard, with App and Key filled.
func TestShardWakeups(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			s := open(t, sv.databases(t, 2))
			defer s.Close()
			ctx := context.Background()
			var gen task.IDGenerator
			due := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			var tasks []*task.Task
			for i := range 40 {
				key := ""
				if i%2 == 0 {
					key = fmt.Sprintf("k%d", i)
				}
				tasks = append(tasks, newTask(s, &gen, "app", key, due.Add(time.Duration(i)*time.Second)))
			}
			if _, err := s.Create(ctx, tasks); err != nil {
				t.Fatal(err)
			}
			all, err := s.Wakeups(ctx, store.Cursor{}, due.Add(time.Hour), 1000)
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			for sh := range s.Shards() {
				ws, err := s.ShardWakeups(ctx, sh, store.Cursor{}, due.Add(time.Hour), 1000)
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range ws {
					got++
					if int(w.ID.Shard()) != sh || w.App != "app" {
						t.Errorf("%s from shard %d: shard %d app %q", w.ID, sh, w.ID.Shard(), w.App)
					}
				}
			}
			if got != len(all) || got != 40 {
				t.Errorf("shards gave %d, Wakeups %d, want 40", got, len(all))
			}
			if _, err := s.ShardWakeups(ctx, s.Shards(), store.Cursor{}, due, 10); err == nil {
				t.Error("a shard past the last one was accepted")
			}
		})
	}
}

func TestCounts(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			s := open(t, sv.databases(t, 2))
			defer s.Close()
			ctx := context.Background()
			var gen task.IDGenerator
			due := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			var ts []*task.Task
			for i := range 30 {
				app := []string{"a", "b"}[i%2]
				ts = append(ts, newTask(s, &gen, app, fmt.Sprint(i), due))
			}
			if _, err := s.Create(ctx, ts); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Update(ctx, ts[0].ID, nil, func(t *task.Task) error {
				t.State = task.Cancelled
				t.WakeAt = time.Time{}
				now := due
				t.FinishedAt = &now
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			got, err := s.Counts(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]map[task.State]int64{"a": {task.Scheduled: 14, task.Cancelled: 1}, "b": {task.Scheduled: 15}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMinConns: Open sets up Options.MinConns connections to each database
// ahead, and keeps them idle in the pool.
func TestMinConns(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			s, err := sqlstore.Open(context.Background(), sqlstore.Options{
				DSNs: sv.databases(t, 2), Tables: testTables, MinConns: 3, Logger: testLogger(t),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			got := sqlstore.OpenConns(s)
			if len(got) != 2 || slices.Min(got) < 3 {
				t.Errorf("connections after Open with MinConns 3: %v per database, want at least 3 each", got)
			}
		})
	}
}

// TestCreateOneTransaction: one Create (the engine's gather of concurrent
// create requests) is one transaction per database, whatever its tasks'
// tables and keys: on PostgreSQL every row it inserts carries one xmin.
func TestCreateOneTransaction(t *testing.T) {
	postgres.use(t)
	dsns := postgres.databases(t, 1)
	s := open(t, dsns)
	defer s.Close()
	var gen task.IDGenerator
	var ts []*task.Task
	for i := range 200 {
		key := ""
		if i%2 == 0 {
			key = fmt.Sprintf("k%d", i)
		}
		ts = append(ts, newTask(s, &gen, "app", key, epoch))
	}
	if _, err := s.Create(context.Background(), ts); err != nil {
		t.Fatal(err)
	}
	var union []string
	for i := range testTables {
		union = append(union, fmt.Sprintf("SELECT xmin::text AS x FROM toc_tasks_%04d", i))
	}
	q := "SELECT count(DISTINCT x) FROM (" + strings.Join(union, " UNION ALL ") + ") AS rows"
	if n := postgres.queryInt(t, dsns[0], q); n != 1 {
		t.Errorf("the rows of one Create carry %d transaction ids, want 1", n)
	}
	if n := postgres.queryInt(t, dsns[0], "SELECT count(*) FROM ("+strings.Join(union, " UNION ALL ")+") AS rows"); n != len(ts) {
		t.Errorf("%d rows, want %d", n, len(ts))
	}
}
