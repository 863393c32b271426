package sqlstore

import "github.com/toc-dev/toc/internal/store"

// An import (engine.Transfer.Import) places each task in a shard this store has,
// and a keyed task in its key's shard, giving it a new id when the one it
// brings names another.
var _ store.Sharded = (*Store)(nil)
