package memstore

import (
	"context"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

var _ store.Counter = (*Store)(nil)

// Counts implements [store.Counter].
func (s *Store) Counts(ctx context.Context) (map[string]map[task.State]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, store.ErrClosed
	}
	out := map[string]map[task.State]int64{}
	for _, t := range s.mu.tasks {
		c := out[t.App]
		if c == nil {
			c = map[task.State]int64{}
			out[t.App] = c
		}
		c[t.State]++
	}
	return out, nil
}
