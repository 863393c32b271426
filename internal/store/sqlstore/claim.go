package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// # Tasks whose id and key name different shards
//
// A task lives in its home shard (home): the shard its id names, or, for
// an id naming a shard the store lacks (another cluster made it), that
// number modulo Shards. The engine makes a keyed task's id with ShardFor,
// so its home is its key's shard. A task imported from another server
// keeps the id it came with, and its home may then differ from its key's
// shard: such a task is stored in its home, and its key is held in its
// key's shard by a key claim, a row of that table with the task's id, app
// and key, state 0 (claimState) and a record of its own (claimRecord)
// naming the task. So:
//
//   - every read and write by id (Get, Update, UpdateMany, the fire path)
//     reads the home table, as for any task: no extra read;
//   - GetByKey and a Create that finds the key taken read the claim, then
//     the task in its home: one extra point read, for moved tasks only;
//   - the claim is in no other order: it has no wake time, no finish time
//     and a state no listing asks for, and Counts leaves it out.
//
// A claim outlives its task when Sweep deletes the task: a Create that
// meets a claim whose task is gone deletes the claim and inserts again, as
// when a holder is swept under it.

// claimState is the state column of a key claim: no task state has it.
const claimState = 0

// claimTag is the first byte of a claim's record; a task record's first
// byte is its version (1 or more).
const claimTag = 0

// claimRecord is the record of a key claim of the task id.
func claimRecord(id task.ID) []byte { return append([]byte{claimTag}, id[:]...) }

// claimOf returns the task id a key claim's record names, false if rec is
// a task's record.
func claimOf(rec []byte) (task.ID, bool) {
	var id task.ID
	if len(rec) != 1+len(id) || rec[0] != claimTag {
		return id, false
	}
	copy(id[:], rec[1:])
	return id, true
}

// home returns the shard the task or schedule with id lives in (see the
// top of this file).
func (s *Store) home(id task.ID) uint16 {
	return uint16(int(id.Shard()) % s.Shards())
}

// Home returns the shard the task or schedule with id lives in: the shard
// its id names, or for an id naming a shard the store lacks, that number
// modulo Shards. The cluster gives the schedules of a shard to the node
// that owns it.
func (s *Store) Home(id task.ID) int { return int(s.home(id)) }

// get reads the task with id from its home; the caller holds s.mu.
func (s *Store) get(ctx context.Context, id task.ID) (*task.Task, error) {
	db, table, _ := s.route(s.home(id))
	return readTask(ctx, db.db, db.get[table], map[string]any{"id": id[:]}, id.String())
}

// claimed is a task of a Create whose home is not its key's shard.
type claimed struct {
	i int // in the batch
	t *task.Task
}

// createClaimed stores t, whose home is not its key's shard: a key claim
// in its key's shard first, then the task in its home. It returns the
// task stored, or the one that holds its key (created false). A failure
// after the claim leaves a claim without its task, which the next create
// of the key (a re-run of the import) replaces.
func (s *Store) createClaimed(ctx context.Context, t *task.Task) (store.CreateResult, error) {
	kdb, ktable, _ := s.route(s.ShardFor(t.App, t.Key, t.ID))
	hdb, htable, _ := s.route(s.home(t.ID))
	cols, err := columns(t)
	if err != nil {
		return store.CreateResult{}, err
	}
	claim := []any{t.ID[:], t.App, []byte(t.Key), int64(claimState), "", nil, int64(0), nil, claimRecord(t.ID)}
	for try := 0; ; try++ {
		if try > maxKeyRetries {
			return store.CreateResult{}, fmt.Errorf("sqlstore: task %s: its key %q of app %q is taken, yet no task has it", t.ID, t.Key, t.App)
		}
		var holder *task.Task
		again := false
		err := s.inTx(ctx, kdb, "claim a key", func(tx *sql.Tx) error {
			holder, again = nil, false
			q, err := s.sizedQuery(kdb, "insert", ktable, 1)
			if err != nil {
				return err
			}
			args, err := q.bindRows([][]any{claim})
			if err != nil {
				return err
			}
			r, err := tx.ExecContext(ctx, q.sql, args...)
			if err != nil {
				return fmt.Errorf("insert into %s: %w", kdb.tables[ktable], err)
			}
			if n, err := r.RowsAffected(); err != nil || n == 1 {
				return err
			}
			id, rec, held, err := readKeyHolder(ctx, tx, kdb.keyHolder[ktable], t.App, t.Key)
			switch {
			case err != nil:
				return err
			case !held:
				again = true
				return nil
			case bytes.Equal(id, t.ID[:]):
				return nil // its own claim: an import run again
			}
			holder, again, err = s.resolveHolder(ctx, tx, kdb, ktable, rec)
			return err
		})
		switch {
		case err != nil:
			return store.CreateResult{}, fmt.Errorf("sqlstore: task %s: claim its key in database %d: %w", t.ID, kdb.index, err)
		case again:
			continue
		case holder != nil:
			return store.CreateResult{Task: holder}, nil
		}
		res := make([]store.CreateResult, 1)
		err = s.inTx(ctx, hdb, "create", func(tx *sql.Tx) error {
			left, err := s.insertChunk(ctx, tx, hdb, []item{{i: 0, t: t, table: htable, cols: cols}}, res)
			if err == nil && len(left) > 0 {
				err = errors.New("its key is taken in its home shard")
			}
			return err
		})
		if err != nil {
			return store.CreateResult{}, fmt.Errorf("sqlstore: task %s: create in database %d: %w", t.ID, hdb.index, err)
		}
		return res[0], nil
	}
}

// resolveHolder returns the task that holds a key whose row in table of db
// has the record rec: the task itself, or the one a key claim names, read
// in its home. A claim whose task is gone (swept) is deleted in tx, and
// again is true: the caller inserts again.
func (s *Store) resolveHolder(ctx context.Context, tx *sql.Tx, db *database, table int, rec []byte) (holder *task.Task, again bool, err error) {
	id, ok := claimOf(rec)
	if !ok {
		t, err := decodeRecord(rec)
		return t, false, err
	}
	t, err := s.get(ctx, id)
	switch {
	case err == nil:
		return t, false, nil
	case !errors.Is(err, store.ErrNotFound):
		return nil, false, err
	}
	q, err := s.dialect.render("delete_claim", tmplData{Table: db.tables[table], Index: table})
	if err != nil {
		return nil, false, err
	}
	if _, err := tx.ExecContext(ctx, q.sql, q.args(map[string]any{"id": id[:]})...); err != nil {
		return nil, false, fmt.Errorf("delete the key claim of task %s, which is gone: %w", id, err)
	}
	return nil, true, nil
}
