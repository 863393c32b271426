package pebblestore

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

var _ store.AttemptLog = (*Store)(nil)

// The attempt log (store.AttemptLog) has a family of its own:
//
//	j <seq 8 bytes big-endian>  → (<id> <attempt uvarint>)…
//
// one entry per batch of push attempts the engine started.
const prefixAttemptLog byte = 'j'

func attemptLogKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixAttemptLog}, seq)
}

// NoteAttempts implements [store.AttemptLog].
func (s *Store) NoteAttempts(ctx context.Context, seq uint64, ids []task.ID, ns []int, drop []uint64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	b := s.db.NewBatch()
	defer b.Close()
	for _, d := range drop {
		if err := b.Delete(attemptLogKey(d), nil); err != nil {
			return fmt.Errorf("pebblestore: attempt log: %w", err)
		}
	}
	if len(ids) > 0 {
		v := make([]byte, 0, len(ids)*(idLen+2))
		for i, id := range ids {
			v = append(v, id[:]...)
			v = binary.AppendUvarint(v, uint64(ns[i]))
		}
		if err := b.Set(attemptLogKey(seq), v, nil); err != nil {
			return fmt.Errorf("pebblestore: attempt log: %w", err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("pebblestore: note %d attempts: %w", len(ids), err)
	}
	return nil
}

// NotedAttempts implements [store.AttemptLog].
func (s *Store) NotedAttempts(ctx context.Context) (map[task.ID]int, []uint64, error) {
	if err := s.enter(ctx); err != nil {
		return nil, nil, err
	}
	defer s.leave()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixAttemptLog}, UpperBound: []byte{prefixAttemptLog + 1}})
	if err != nil {
		return nil, nil, fmt.Errorf("pebblestore: read the attempt log: %w", err)
	}
	defer it.Close()
	noted := map[task.ID]int{}
	var seqs []uint64
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != 9 {
			return nil, nil, fmt.Errorf("pebblestore: malformed attempt log key %x", k)
		}
		seqs = append(seqs, binary.BigEndian.Uint64(k[1:]))
		for len(v) > 0 {
			if len(v) < idLen {
				return nil, nil, fmt.Errorf("pebblestore: malformed attempt log entry %x", k)
			}
			var id task.ID
			copy(id[:], v)
			n, w := binary.Uvarint(v[idLen:])
			if w <= 0 {
				return nil, nil, fmt.Errorf("pebblestore: malformed attempt log entry %x", k)
			}
			v = v[idLen+w:]
			noted[id] = max(noted[id], int(n))
		}
	}
	if err := it.Error(); err != nil {
		return nil, nil, fmt.Errorf("pebblestore: read the attempt log: %w", err)
	}
	return noted, seqs, nil
}

// DropAttempts implements [store.AttemptLog].
func (s *Store) DropAttempts(ctx context.Context, seqs []uint64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	b := s.db.NewBatch()
	defer b.Close()
	for _, d := range seqs {
		if err := b.Delete(attemptLogKey(d), nil); err != nil {
			return fmt.Errorf("pebblestore: attempt log: %w", err)
		}
	}
	if err := b.Commit(s.wo); err != nil {
		return fmt.Errorf("pebblestore: drop %d attempt log entries: %w", len(seqs), err)
	}
	return nil
}
