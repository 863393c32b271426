package engine

import (
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/memstore"
	"github.com/toc-dev/toc/task"
)

// shardedStore is a memstore with four shards, as sqlstore has.
type shardedStore struct{ *memstore.Store }

func (shardedStore) Shards() int { return 4 }

// shardOf is the test's ShardFor: a key's length, or the id's last byte.
func shardOf(app, key string, id task.ID) uint16 {
	if key != "" {
		return uint16(len(key) % 4)
	}
	return uint16(id[15] % 4)
}

// exported is a task as another server would export it.
func exported(id task.ID, app, key string, state task.State) *task.Task {
	now := time.Now().UTC().Truncate(time.Millisecond)
	t := &task.Task{ID: id, App: app, Key: key, DueAt: now.Add(time.Hour), NextAttemptAt: now.Add(time.Hour),
		Target: httpTarget, Retry: task.RetryPolicy{}.WithDefaults(), State: state, CreatedAt: now, UpdatedAt: now}
	if state.Final() {
		t.FinishedAt = &now
	}
	return t
}

// TestImportKeepsIDs checks that an import into a sharded store keeps
// every id, whatever shard it names: the store places the task (sqlstore's
// claim.go), the engine does not re-id it.
func TestImportKeepsIDs(t *testing.T) {
	b := setup(t, func(c *Config) {
		c.Store = shardedStore{memstore.New()}
		c.ShardFor = shardOf
	})
	ctx := t.Context()
	var gen task.IDGenerator
	keyed := gen.New(time.Now(), 0)   // key "abc": shard 3
	keyless := gen.New(time.Now(), 1) // shard 1
	far := gen.New(time.Now(), 7)     // no shard 7
	placed := gen.New(time.Now(), 2)  // key "ab": shard 2, as named
	ids := []task.ID{keyed, keyless, far, placed}
	ts := []*task.Task{
		exported(keyed, "app", "abc", task.Scheduled),
		exported(keyless, "app", "", task.Delivered),
		exported(far, "app", "", task.Dead),
		exported(placed, "app", "ab", task.Cancelled),
	}
	res, err := b.eng.Transfer().Import(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Imported != 4 || len(res.Moved) != 0 {
		t.Fatalf("import: %+v, want 4 imported, none moved", res)
	}
	for _, id := range ids {
		if got := b.get(t, id); got.ID != id {
			t.Errorf("Get(%s) = task %s", id, got.ID)
		}
	}
	if _, err := b.eng.Get(ctx, gen.New(time.Now(), 0)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get of an unknown id: %v", err)
	}
	// Again: nothing imported.
	res, err = b.eng.Transfer().Import(ctx, []*task.Task{exported(keyed, "app", "abc", task.Scheduled), exported(keyless, "app", "", task.Delivered), exported(far, "app", "", task.Dead)})
	if err != nil || res.Imported != 0 || res.Existing != 3 {
		t.Errorf("import again: %+v, %v", res, err)
	}
}

func TestImportRefusesAll(t *testing.T) {
	b := setup(t, nil)
	var gen task.IDGenerator
	good := exported(gen.New(time.Now(), 0), "app", "k", task.Scheduled)
	bad := exported(gen.New(time.Now(), 0), "app", "k2", task.Delivered)
	bad.FinishedAt = nil
	_, err := b.eng.Transfer().Import(t.Context(), []*task.Task{good, bad})
	var ie *ImportError
	var fe *task.FieldError
	if !errors.As(err, &ie) || ie.Index != 1 || !errors.As(err, &fe) || fe.Field != "finished_at" {
		t.Fatalf("err = %v, want task 1's finished_at", err)
	}
	if _, err := b.eng.Get(t.Context(), good.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the good task of a refused call: %v", err)
	}
	if _, err := b.eng.Transfer().Backup(t.Context(), io.Discard); !errors.Is(err, ErrNoBackup) {
		t.Errorf("backup of a memstore: %v", err)
	}
	if err := b.eng.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.eng.Transfer().Import(t.Context(), []*task.Task{good}); !errors.Is(err, ErrNotReady) {
		t.Errorf("import into a stopped engine: %v", err)
	}
}

func TestExportOrder(t *testing.T) {
	b := setup(t, nil)
	var gen task.IDGenerator
	var ts []*task.Task
	for _, app := range []string{"b", "a"} {
		for _, st := range []task.State{task.Dead, task.Scheduled} {
			for range 3 {
				ts = append(ts, exported(gen.New(time.Now(), 0), app, "", st))
			}
		}
	}
	if _, err := b.eng.Transfer().Import(t.Context(), ts); err != nil {
		t.Fatal(err)
	}
	var got []string
	n, err := b.eng.Transfer().Export(t.Context(), ExportFilter{}, func(tk *task.Task) error {
		got = append(got, tk.App+"/"+string(tk.State))
		return nil
	})
	if err != nil || n != len(ts) {
		t.Fatalf("export: %d, %v", n, err)
	}
	want := []string{"a/scheduled", "a/scheduled", "a/scheduled", "a/dead", "a/dead", "a/dead", "b/scheduled", "b/scheduled", "b/scheduled", "b/dead", "b/dead", "b/dead"}
	if !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	n, err = b.eng.Transfer().Export(t.Context(), ExportFilter{App: "b", State: task.Dead}, func(*task.Task) error { return nil })
	if err != nil || n != 3 {
		t.Errorf("export of b's dead: %d, %v", n, err)
	}
	stop := errors.New("stop")
	n, err = b.eng.Transfer().Export(t.Context(), ExportFilter{}, func(*task.Task) error { return stop })
	if !errors.Is(err, stop) || n != 0 {
		t.Errorf("export stopped by emit: %d, %v", n, err)
	}
	if _, err := b.eng.Transfer().Export(t.Context(), ExportFilter{State: "asleep"}, nil); err == nil {
		t.Error("export of a bad state: no error")
	}
}
