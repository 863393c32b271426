package pebblestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

var _ store.Counter = (*Store)(nil)

// countCheckEvery is how many keys Counts reads between checks of its ctx.
const countCheckEvery = 4096

// Counts implements [store.Counter]. It reads the keys of the list index
// (a <app> 0x00 <state byte> <id>), never a value, from one consistent
// view of the database: one key per stored task.
func (s *Store) Counts(ctx context.Context) (map[string]map[task.State]int64, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixApp}, UpperBound: []byte{prefixApp + 1}})
	if err != nil {
		return nil, fmt.Errorf("pebblestore: counts: new iterator: %w", err)
	}
	out := map[string]map[task.State]int64{}
	var (
		app    []byte               // the app of the keys being counted
		counts map[task.State]int64 // out[app]
		n      int
	)
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%countCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				it.Close()
				return nil, err
			}
		}
		k := it.Key()
		end := bytes.IndexByte(k[1:], 0) + 1 // the separator after the app
		if end < 1 || len(k) != end+2+idLen {
			it.Close()
			return nil, fmt.Errorf("pebblestore: malformed list key %x", k)
		}
		st, err := parseStateByte(k[end+1])
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("pebblestore: list key %x: %w", k, err)
		}
		if counts == nil || !bytes.Equal(k[1:end], app) {
			app = append(app[:0], k[1:end]...)
			if counts = out[string(app)]; counts == nil {
				counts = map[task.State]int64{}
				out[string(app)] = counts
			}
		}
		counts[st]++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, fmt.Errorf("pebblestore: counts: %w", err)
	}
	return out, nil
}
