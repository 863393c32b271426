// Package pebblestore is toc's embedded [store.Store]: tasks and their
// indexes in a Pebble database kept in one directory. It is the default
// store of the product; nothing else needs to run.
//
// # Layout
//
// Each task is a record under its id, plus one entry in each index that
// applies to it: the wake-time order, the claimable order of its app (a
// pull task waiting unwoken; one woken at its next attempt is found by its
// wake entry), its app's key, the list of its app and state, and the
// finish-time order. The
// layout is written down in keys.go. Every Create, Update, UpdateMany and
// Sweep is one Pebble batch, so a task and its index entries change
// together. Schedules ([store.Schedules]) have key families of their own,
// written the same way (schedules.go).
//
// # Durability
//
// Batches are committed with pebble.Sync: when Create, Update, UpdateMany
// or Sweep returns, the change is in the write-ahead log and fsync'd.
// Concurrent commits share one fsync through Pebble's commit pipeline, which
// is why no lock is ever held across every commit (see below).
// [Options.NoSync] turns the fsync off, for tests and benchmarks;
// [store.UpdateOpts.NoSync] turns it off for one Update or UpdateMany.
//
// # Concurrency
//
// Reads (Get, GetByKey, Wakeups, Claimable, List) take no lock: each reads
// through a fresh iterator or snapshot, so it sees every write whose commit
// returned before the read began. Writes lock stripes, not the store:
//
//   - Update locks the stripe of the task's id across read, fn, batch and
//     commit, so Updates of one task are serialized and Updates of others
//     are not. UpdateMany locks the stripes of all its ids, in ascending
//     order, the same way, across one batch and one commit.
//   - Create locks the id stripes of its new tasks, then the stripes of
//     their (app, key) pairs, across the check that a key is free and the
//     commit that takes it.
//   - UpdateSchedule locks the stripe of the schedule's id, as Update does;
//     CreateSchedule and DeleteSchedule lock it, then the key stripe of
//     the schedule's (app, key).
//   - Sweep locks the id stripes of the tasks it deletes, then their key
//     stripes, across the re-check and the commit. It holds up to limit id
//     stripes (of 512) for one commit, so callers should keep limit modest
//     (hundreds) to not stall Updates.
//
// Lock order: id stripes before key stripes; within each kind, stripes in
// ascending index order. The two kinds are separate arrays, so an id stripe
// and a key stripe never alias. Every call also holds Store.mu shared for
// its duration (Close holds it exclusively); it is a read lock, so commits
// still run concurrently and group.
package pebblestore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/record"
	"github.com/toc-dev/toc/task"
)

var _ store.Store = (*Store)(nil)

// Options configure [Open].
type Options struct {
	// Dir is the directory of the database. Required. It is created if it
	// does not exist.
	Dir string

	// Logger receives Pebble's messages: its informational ones at Debug
	// level, its errors at Error. Default slog.Default().
	Logger *slog.Logger

	// NoSync makes Create, Update and Sweep return before their write is
	// fsync'd: a crash may lose the last writes, though it never corrupts
	// the store. Default false: every write is on disk when the call
	// returns. Meant for tests and benchmarks.
	NoSync bool

	// CacheSize is the size in bytes of Pebble's block cache, which holds
	// recently read parts of the database in memory. Default
	// [CacheSizeDefault]. The memtables, which Pebble charges to the same
	// cache, come on top of it (two of 32 MiB once the first is flushed).
	CacheSize int64

	// FS is the file system the database lives in. Default vfs.Default, the
	// operating system's. Tests may pass vfs.NewMem() or a fault-injecting
	// wrapper.
	FS vfs.FS

	// Reserve is the size in bytes of the disk reserve the store keeps in
	// Dir (file ReserveName) and frees when the disk fills, so that the
	// outcomes of what it holds can still be written (disk.go). Default:
	// [ReserveDefault], or a twentieth of the file system when that is
	// less; negative: none, and no checks of the free space. A file
	// system that does not tell its usage (vfs.NewMem) has none either.
	Reserve int64

	// DiskCheck is how often the free space is read. Default
	// [DiskCheckDefault].
	DiskCheck time.Duration
}

// memTableSize is Pebble's memtable size. A task is written twice (created,
// then its outcome), each write replacing index entries: when both land in
// one memtable, the replaced versions never reach an sstable; with Pebble's
// default of 4 MiB, compactions spent much of the fire path's CPU rewriting
// them.
//
// Pebble's other defaults stand: tried against them with toc bench
// --embedded --workload fire --timeline 100ms on 2 cores (alternating runs),
// none clearly helped. Nothing stalls writes: a flush and its L0->L6
// compactions (one every ~7 s at 10 000 fires/s) cost the 100 ms buckets
// under them p99 25-65 ms through the CPU they take, and 64 or 128 MiB
// memtables, MemTableStopWritesThreshold 4, no compression and
// CompactionConcurrencyRange 2 left p99 and max within the noise or worse
// (128 MiB: +50 MiB of RSS; no compression: +25% of disk). An
// L0CompactionThreshold of 8 made it worse (p99 41 and 381 ms against 28
// and 21), likely as it skips the compaction before the fires and leaves
// each read more L0 files to look through.
const memTableSize = 32 << 20

// tombstoneDenseOff turns off Pebble's tombstone-density compactions (a
// negative threshold): each flush of a memtable full of outcomes (whose
// deletes of w and a entries make its blocks tombstone-dense) rewrote the
// L6 tables under it at once, where Pebble's L0 compactions rewrite them
// once per several flushes (L0CompactionThreshold, 4). toc's scans keep
// off the tombstones anyway: Wakeups starts after its cursor, Claimable
// from its floor (pullfloor.go), and a tombstone stays at most until its
// L0 table is compacted. Measured with toc bench --embedded --pull
// --workload fire --n 100000 --spread 0s, alternating runs: CPU per task
// lower in 6 of 6 pairs, by 2.5 µs (8%) on average.
const tombstoneDenseOff = -1

// memTableReserve is what the memtables take of Pebble's block cache in
// steady state (see Open), added to the cache so that CacheSize is left for
// blocks.
const memTableReserve = 2 * memTableSize

// CacheSizeDefault is the default [Options.CacheSize]: 64 MiB.
const CacheSizeDefault = 64 << 20

// Validate reports what is wrong with o, naming the field.
func (o Options) Validate() error {
	if o.Dir == "" {
		return errors.New("pebblestore: Options.Dir is required")
	}
	if o.CacheSize < 0 {
		return fmt.Errorf("pebblestore: Options.CacheSize is negative (%d)", o.CacheSize)
	}
	if o.DiskCheck < 0 {
		return fmt.Errorf("pebblestore: Options.DiskCheck is negative (%s)", o.DiskCheck)
	}
	return nil
}

// stripes is the number of id stripes and of key stripes.
const stripes = 512

// stripe is a mutex alone on its cache line.
type stripe struct {
	sync.Mutex
	_ [64 - 8]byte
}

// Store is the Pebble-backed [store.Store]. Open one with [Open].
type Store struct {
	db   *pebble.DB
	wo   *pebble.WriteOptions
	seed maphash.Seed
	dir  string // Options.Dir
	fs   vfs.FS // Options.FS, or vfs.Default
	disk *disk  // the free space and the reserve (disk.go)

	openDB    func() (*pebble.DB, error) // opens the database, as Open did (reopen)
	reopening atomic.Bool                // reopen waits for the calls in flight: new ones are refused

	backup sync.Mutex // one Checkpoint at a time (checkpoint.go)

	idLocks  [stripes]stripe    // by task id; see the package doc for the lock order
	keyLocks [stripes]stripe    // by (app, key)
	recent   [stripes]recentSet // by id stripe, under its lock (recent.go)
	pull     pullFloors         // where Claimable's scans start (pullfloor.go)
	alog     attemptLog         // attemptlog.go

	mu struct {
		// Held for reading by every call for its duration, for writing by
		// Close and reopen: they wait for calls in flight, and no call
		// reaches the database once it is closed.
		sync.RWMutex
		closed bool
		down   error // the database is closed for a reopen that failed: calls fail with it
	}
}

// Open opens the store in opts.Dir, creating it if needed. It refuses
// ([ErrNotStore]) a directory that holds files but no store, such as a
// backup's copy cut short, and ([store.ErrDiskFull]) to start on a full
// disk without a reserve to free (disk.go).
func Open(opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	fs := opts.FS
	if fs == nil {
		fs = vfs.Default
	}
	if err := checkDir(fs, opts.Dir); err != nil {
		return nil, err
	}
	if err := fs.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("pebblestore: open %s: %w", opts.Dir, err)
	}
	log := logger.With(slog.String("component", "pebble"))
	d := newDisk(opts, fs, log)
	if err := d.prepare(); err != nil {
		return nil, err
	}
	pl := pebbleLogger{l: log, d: d}
	openDB := func() (*pebble.DB, error) {
		// Pebble charges its memtables to the block cache (Cache.Reserve):
		// the one being filled and the one flushing or kept for reuse, two
		// of memTableSize from the first flush on. Sized at CacheSize
		// alone, a 64 MiB cache held no block at all after that, and
		// every read went to the files (found by toc bench's pull burst:
		// hits 0).
		cache := pebble.NewCache(cmp.Or(opts.CacheSize, CacheSizeDefault) + memTableReserve)
		defer cache.Unref() // the database holds its own reference
		po := &pebble.Options{
			Cache:              cache,
			FS:                 walWatch{FS: vfs.OnDiskFull(fs, d.onENOSPC), d: d},
			Logger:             pl,
			EventListener:      eventListener(pl),
			FormatMajorVersion: pebble.FormatNewest,
			MemTableSize:       memTableSize,
		}
		// Bloom filters on every level: each attempt reads its task by id, and
		// without filters a point read opens every overlapping sstable.
		for i := range po.Levels {
			po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		}
		// No tombstone-density compactions (see tombstoneDenseOff).
		po.Experimental.TombstoneDenseCompactionThreshold = tombstoneDenseOff
		db, err := pebble.Open(opts.Dir, po)
		if err != nil {
			return nil, fmt.Errorf("pebblestore: open %s: %w", opts.Dir, err)
		}
		if err := dropWokenPullEntries(db); err != nil {
			return nil, errors.Join(fmt.Errorf("pebblestore: open %s: %w", opts.Dir, err), db.Close())
		}
		return db, nil
	}
	db, err := openDB()
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, wo: pebble.Sync, seed: maphash.MakeSeed(), dir: opts.Dir, fs: fs, disk: d, openDB: openDB}
	d.reopen = s.reopen
	d.start()
	if opts.NoSync {
		s.wo = pebble.NoSync
	}
	return s, nil
}

// dropWokenPullEntries deletes the p entries of pull tasks woken at their
// next attempt, which layouts before waitsUnwoken wrote for every
// scheduled pull task: their w entries find them now, and their writes no
// longer delete p entries. Such a task's w entry has the same time and id
// as its p entry; one written before w entries carried the app gets it
// (Claimable reads the app there). What is left are the entries of tasks
// waiting unwoken, which a later Open steps over again.
func dropWokenPullEntries(db *pebble.DB) error {
	b := db.NewBatch()
	defer func() { b.Close() }()
	err := scan(db, []byte{prefixPull}, []byte{prefixPull + 1}, func(k, _ []byte) (bool, error) {
		n := len(k) - msLen - idLen // the app's separator ends at n
		if n < 2 || k[n-1] != 0 {
			return false, fmt.Errorf("pebblestore: malformed pull key %x", k)
		}
		app := k[1 : n-1]
		ms, id, err := parsePullKey(k, n)
		if err != nil {
			return false, err
		}
		wk := wakeKey(ms, id)
		v, closer, err := db.Get(wk)
		if errors.Is(err, pebble.ErrNotFound) {
			return true, nil // waiting unwoken: it stays
		}
		if err != nil {
			return false, fmt.Errorf("pebblestore: wake entry of %s: %w", id, err)
		}
		if len(v) == 2 { // written before w entries carried the app
			err = b.Set(wk, append(slices.Clip(v), app...), nil)
		}
		err = errors.Join(err, closer.Close(), b.Delete(k, nil))
		if err == nil && b.Len() >= 1<<20 {
			err = db.Apply(b, pebble.Sync)
			b.Close()
			b = db.NewBatch()
		}
		return err == nil, err
	})
	if err == nil && !b.Empty() {
		err = db.Apply(b, pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("drop the pull entries of woken tasks: %w", err)
	}
	return nil
}

// eventListener logs Pebble's flushes, compactions, write stalls and slow
// disk operations through l, at Debug as Pebble's other informational
// messages: with --log-level debug they can be laid beside the lateness of
// fires over time (toc bench --timeline). Pebble's default listener logs
// none of them. Background errors are counted and their log rate-limited
// (disk.backgroundError). The other events keep Pebble's defaults.
func eventListener(l pebbleLogger) *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: l.d.backgroundError,
		FlushEnd:        func(i pebble.FlushInfo) { l.Infof("%s", i) },
		CompactionEnd:   func(i pebble.CompactionInfo) { l.Infof("%s", i) },
		WriteStallBegin: func(i pebble.WriteStallBeginInfo) { l.Infof("%s", i) },
		WriteStallEnd:   func() { l.Infof("write stall ending") },
		DiskSlow:        func(i pebble.DiskSlowInfo) { l.Infof("%s", i) },
	}
}

// enter starts a call: it fails once the store is closed and otherwise
// holds s.mu shared until leave.
func (s *Store) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.reopening.Load() {
		return fmt.Errorf("%w: the store is being opened again after a failed write", store.ErrDiskFull)
	}
	select {
	case <-s.disk.closing:
		return store.ErrClosed
	default:
	}
	s.mu.RLock()
	if s.mu.closed {
		s.mu.RUnlock()
		return store.ErrClosed
	}
	if err := s.mu.down; err != nil {
		s.mu.RUnlock()
		return err
	}
	return nil
}

func (s *Store) leave() { s.mu.RUnlock() }

// idStripe returns the index of id's stripe in idLocks.
func (s *Store) idStripe(id task.ID) int {
	return int(maphash.Bytes(s.seed, id[:]) % stripes)
}

// keyStripe returns the index of (app, key)'s stripe in keyLocks.
func (s *Store) keyStripe(app, key string) int {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(app)
	h.WriteByte(0)
	h.WriteString(key)
	return int(h.Sum64() % stripes)
}

// lockID locks the stripe of id in idLocks and returns the function that
// unlocks it.
func (s *Store) lockID(id task.ID) (unlock func()) {
	mu := &s.idLocks[s.idStripe(id)]
	mu.Lock()
	return mu.Unlock
}

// lockKey locks the stripe of (app, key) in keyLocks and returns the
// function that unlocks it.
func (s *Store) lockKey(app, key string) (unlock func()) {
	mu := &s.keyLocks[s.keyStripe(app, key)]
	mu.Lock()
	return mu.Unlock
}

// CreateWriters implements [store.CreateWriters]: one Create at a time.
// Pebble's log syncs every batch written before the sync starts, so a
// second Create in flight would only enter the log early with the few
// requests that came first and pay a sync of its own (on a small machine an
// fdatasync costs more CPU than the create itself); one at a time, the next
// takes every request that came during the sync.
func (s *Store) CreateWriters() int { return 1 }

var _ store.CreateWriters = (*Store)(nil)

// Create implements [store.Store].
func (s *Store) Create(ctx context.Context, tasks []*task.Task) ([]store.CreateResult, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	for _, t := range tasks {
		if err := checkTask(t); err != nil {
			return nil, err
		}
	}

	// Lock the id stripes, so the new tasks enter their recent sets
	// before any Update can read them, then the key stripes (see the lock
	// order).
	// A single create (the common case) takes its stripes from the stack.
	var idBuf, keyBuf [4]int
	idStripes, keyStripes := idBuf[:0], keyBuf[:0]
	keyed := 0 // tasks with a key
	for _, t := range tasks {
		idStripes = append(idStripes, s.idStripe(t.ID))
		if t.Key != "" {
			keyStripes = append(keyStripes, s.keyStripe(t.App, t.Key))
			keyed++
		}
	}
	idStripes = lockStripes(&s.idLocks, idStripes)
	defer unlockStripes(&s.idLocks, idStripes)
	keyStripes = lockStripes(&s.keyLocks, keyStripes)
	defer unlockStripes(&s.keyLocks, keyStripes)

	res := make([]store.CreateResult, len(tasks))
	created := make([]*task.Task, 0, len(tasks)) // as written: the caller's own
	var byKey map[string]*task.Task              // keyKey → the task that has it, for a batch of several keys
	if keyed > 1 {
		byKey = make(map[string]*task.Task, keyed)
	}
	// The key entries of a batch of several keys are looked up in one
	// pass (keyOwners), each found entry's task read after.
	var kks [][]byte // keyKey of tasks[i], nil for none
	var owners map[string]task.ID
	if len(keyStripes) > 1 {
		kks = make([][]byte, len(tasks))
		size := 0
		for _, t := range tasks {
			if t.Key != "" {
				size += 1 + len(t.App) + 1 + len(t.Key)
			}
		}
		buf := make([]byte, 0, size) // the entries cut from one buffer
		for i, t := range tasks {
			if t.Key != "" {
				from := len(buf)
				buf = appendKeyKey(buf, t.App, t.Key)
				kks[i] = buf[from:len(buf):len(buf)]
			}
		}
		var repeats bool
		var err error
		if owners, repeats, err = keyOwners(s.db, kks); err != nil {
			return nil, err
		}
		if !repeats {
			byKey = nil // no key twice in the batch: nothing to find there
		}
	}
	for i, t := range tasks {
		var kk []byte
		if t.Key != "" {
			if kks != nil {
				kk = kks[i]
			} else {
				kk = keyKey(t.App, t.Key)
			}
			owner, ok := byKey[string(kk)]
			if !ok {
				var err error
				if owners == nil {
					owner, err = getByKey(s.db, kk)
				} else if id, ok := owners[string(kk)]; ok {
					owner, err = keyTask(s.db, kk, id)
				}
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return nil, err
				}
			}
			if owner != nil {
				if byKey != nil {
					byKey[string(kk)] = owner
				}
				res[i] = store.CreateResult{Task: owner.Clone()}
				continue
			}
		}
		// The caller hands t over (store.Store's Create): it is written
		// and answered as it is, normalized in place, and copied only
		// for the recent set.
		c := normalize(t)
		if kk != nil && byKey != nil {
			byKey[string(kk)] = c
		}
		res[i] = store.CreateResult{Task: c, Created: true}
		created = append(created, c)
	}
	b, err := writeNew(s.db, created)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	if len(created) > 0 {
		if err := s.refuseNew(); err != nil {
			return nil, err
		}
	}
	if err := s.commit(b, s.wo); err != nil {
		return nil, fmt.Errorf("pebblestore: create: %w", err)
	}
	now := time.Now()
	for _, c := range created {
		s.pull.wrote(nil, c)
		s.recent[s.idStripe(c.ID)].keepCopy(c, now)
	}
	return res, nil
}

// Get implements [store.Store].
func (s *Store) Get(ctx context.Context, id task.ID) (*task.Task, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	return get(s.db, id)
}

// GetByKey implements [store.Store].
func (s *Store) GetByKey(ctx context.Context, app, key string) (*task.Task, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	// A snapshot, so that a sweep between the two reads can't make a
	// taken key look free.
	snap := s.db.NewSnapshot()
	defer snap.Close()
	return getByKey(snap, keyKey(app, key))
}

// Update implements [store.Store]. fn runs with the task's stripe locked, so
// it must not call the store.
func (s *Store) Update(ctx context.Context, id task.ID, opts *store.UpdateOpts, fn func(*task.Task) error) (*task.Task, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	stripe := s.idStripe(id)
	mu := &s.idLocks[stripe]
	mu.Lock()
	defer mu.Unlock()

	old, err := s.readLocked(stripe, id)
	if err != nil {
		return nil, err
	}
	c, err := record.Apply(old.t, fn)
	if err != nil {
		return old.own(), err
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := stage(b, old.t, c); err != nil {
		return old.own(), err
	}
	if err := s.commit(b, s.writeOptions(opts)); err != nil {
		return nil, fmt.Errorf("pebblestore: update %s: %w", id, err)
	}
	s.pull.wrote(old.t, c)
	s.recent[stripe].keep(id, c, time.Now())
	return c.Clone(), nil
}

// UpdateMany implements [store.Store]: Update for every id at once, with
// one batch and one commit. It locks the stripes of all ids (in ascending
// order, as Create and Sweep do) across the reads, fn and the commit, so fn
// must not call the store.
func (s *Store) UpdateMany(ctx context.Context, ids []task.ID, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	if err := s.enter(ctx); err != nil {
		return make([]*task.Task, len(ids)), slices.Repeat([]error{err}, len(ids))
	}
	defer s.leave()
	stripes := make([]int, len(ids))
	for i, id := range ids {
		stripes[i] = s.idStripe(id)
	}
	defer lockAll(&s.idLocks, slices.Clone(stripes))()

	olds := make([]read, len(ids))
	readErrs := make([]error, len(ids))
	var miss []int // not kept in the recent sets: read from the database
	for i, id := range ids {
		if t, kept := s.recent[stripes[i]].get(id); kept {
			olds[i] = read{t, true}
			continue
		}
		miss = append(miss, i)
	}
	s.getMany(ids, miss, olds, readErrs)
	return s.updateRead(opts, opts.SharedTasks(), stripes, olds, readErrs, fn)
}

// getManyMin is the fewest reads getMany makes with one iterator: below
// it, a point read each.
const getManyMin = 4

// getMany reads the tasks ids[i] for i in which into olds[i] (readErrs[i]:
// why not). Several are read with one iterator, in id order: a fire job's
// tasks came due together and were mostly created together, so their
// records sit side by side, and each seek starts from the last one
// instead of from the top of every level, as a point read (Get) does.
func (s *Store) getMany(ids []task.ID, which []int, olds []read, readErrs []error) {
	if len(which) < getManyMin {
		for _, i := range which {
			olds[i].t, readErrs[i] = get(s.db, ids[i])
		}
		return
	}
	slices.SortFunc(which, func(a, b int) int { return bytes.Compare(ids[a][:], ids[b][:]) })
	first, last := ids[which[0]], ids[which[len(which)-1]]
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: taskKey(first), UpperBound: successor(taskKey(last))})
	if err != nil {
		err = fmt.Errorf("pebblestore: new iterator: %w", err)
		for _, i := range which {
			readErrs[i] = err
		}
		return
	}
	key := make([]byte, 0, 1+len(first))
	for _, i := range which {
		id := ids[i]
		key = append(append(key[:0], prefixTask), id[:]...)
		if !it.SeekGE(key) || !bytes.Equal(it.Key(), key) {
			if err := it.Error(); err != nil {
				readErrs[i] = fmt.Errorf("pebblestore: get %s: %w", id, err)
			} else {
				readErrs[i] = store.ErrNotFound
			}
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			readErrs[i] = fmt.Errorf("pebblestore: get %s: %w", id, err)
			continue
		}
		if olds[i].t, err = decodeRecord(v); err != nil {
			readErrs[i] = fmt.Errorf("task %s: %w", id, err)
		}
	}
	if err := it.Close(); err != nil {
		for _, i := range which {
			if readErrs[i] == nil && olds[i].t == nil {
				readErrs[i] = fmt.Errorf("pebblestore: read: %w", err)
			}
		}
	}
}

// UpdateKnown implements [store.KnownUpdater]: UpdateMany (with Shared)
// over olds as the caller knows them stored, without reading them. It
// locks their stripes as UpdateMany does; a task whose stripe's recent set
// keeps another version than the caller's gets [store.ErrConflict] (the
// caller's copy is out of date).
func (s *Store) UpdateKnown(ctx context.Context, olds []*task.Task, opts *store.UpdateOpts, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	if err := s.enter(ctx); err != nil {
		return make([]*task.Task, len(olds)), slices.Repeat([]error{err}, len(olds))
	}
	defer s.leave()
	stripes := make([]int, len(olds))
	for i, t := range olds {
		stripes[i] = s.idStripe(t.ID)
	}
	defer lockAll(&s.idLocks, slices.Clone(stripes))()
	rs := make([]read, len(olds))
	readErrs := make([]error, len(olds))
	for i, t := range olds {
		if k, kept := s.recent[stripes[i]].get(t.ID); kept && k != t && !sameVersion(k, t) {
			readErrs[i] = fmt.Errorf("pebblestore: update %s: not the version stored: %w", t.ID, store.ErrConflict)
			continue
		}
		rs[i] = read{t: t}
	}
	return s.updateRead(opts, true, stripes, rs, readErrs, fn)
}

// sameVersion reports whether a and b are the same version of a task, as
// far as a look at its moving parts tells.
func sameVersion(a, b *task.Task) bool {
	return a.State == b.State && a.Attempts == b.Attempts && a.UpdatedAt.Equal(b.UpdatedAt) &&
		a.NextAttemptAt.Equal(b.NextAttemptAt) && a.WakeAt.Equal(b.WakeAt) && a.Lease == b.Lease
}

// updateRead is the rest of UpdateMany and UpdateKnown once the tasks are
// read (olds; readErrs: why not), their stripes locked: fn, the batch and
// its commit, the recent sets. shared: see [store.UpdateOpts].
func (s *Store) updateRead(opts *store.UpdateOpts, shared bool, stripes []int, olds []read, readErrs []error, fn func([]*task.Task) []error) ([]*task.Task, []error) {
	res := make([]*task.Task, len(olds))
	ts := make([]*task.Task, len(olds)) // olds' tasks, nil where not read
	for i := range olds {
		ts[i] = olds[i].t
	}
	own := func(r read) *task.Task {
		if shared {
			return r.t
		}
		return r.own()
	}
	cs, errs := record.ApplyManyWith(ts, shared, fn)
	w := getSortedWrites() // the batch in key order (sortedwrites.go)
	defer w.put()
	// Staged in id order, most kinds of key come in order already.
	order := make([]int, len(cs))
	for i := range order {
		order[i] = i
	}
	idOf := func(i int) []byte {
		if olds[i].t != nil {
			return olds[i].t.ID[:]
		}
		return nil
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(idOf(a), idOf(b)) })
	for _, i := range order {
		c := cs[i]
		if readErrs[i] != nil {
			errs[i] = readErrs[i]
			continue
		}
		if errs[i] == nil {
			errs[i] = stage(w, olds[i].t, c)
		}
		if errs[i] != nil {
			res[i] = own(olds[i])
		}
	}
	if len(w.ops) > 0 {
		b := s.db.NewBatchWithSize(w.batchSize())
		defer b.Close()
		err := w.applyTo(b)
		if err == nil {
			err = s.commit(b, s.writeOptions(opts))
		}
		if err != nil {
			err = fmt.Errorf("pebblestore: update many: %w", err)
			for i, c := range cs {
				if c != nil && errs[i] == nil {
					res[i], errs[i] = own(olds[i]), err
				}
			}
			return res, errs
		}
	}
	now := time.Now()
	for i, c := range cs {
		if c != nil && errs[i] == nil {
			s.pull.wrote(olds[i].t, c)
			s.recent[stripes[i]].keep(c.ID, c, now)
			res[i] = c
			if !shared {
				res[i] = c.Clone()
			}
		}
	}
	return res, errs
}

// A read is a task as Update reads it, with its id stripe locked.
type read struct {
	t    *task.Task
	kept bool // t is the recent set's: read it, never change it
}

// own returns the task as read for the caller to keep: a copy when it is
// the recent set's.
func (r read) own() *task.Task {
	if r.kept {
		return r.t.Clone()
	}
	return r.t
}

// readLocked reads the task with id, whose stripe the caller has locked:
// from the stripe's recent set when it is kept there, else from the
// database.
func (s *Store) readLocked(stripe int, id task.ID) (read, error) {
	if t, kept := s.recent[stripe].get(id); kept {
		return read{t, true}, nil
	}
	t, err := get(s.db, id)
	return read{t: t}, err
}

// stage checks c, what fn made of old, and adds its write to b. When it
// fails on the task (a check, its encoding) it adds nothing.
func stage(b batchWriter, old, c *task.Task) error {
	if err := checkTask(c); err != nil {
		return err
	}
	return writeTask(b, old, c)
}

// writeOptions returns how an Update with opts commits.
func (s *Store) writeOptions(opts *store.UpdateOpts) *pebble.WriteOptions {
	if opts != nil && opts.NoSync {
		return pebble.NoSync
	}
	return s.wo
}

// Wakeups implements [store.Store]. Times are compared at millisecond
// precision.
func (s *Store) Wakeups(ctx context.Context, after store.Cursor, until time.Time, limit int) ([]store.Wakeup, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit <= 0 {
		return nil, nil
	}
	lower := []byte{prefixWake}
	if !after.At.IsZero() {
		lower = successor(wakeKey(after.At.UnixMilli(), after.ID))
	}
	upper := prefixEnd([]byte{prefixWake})
	if ms := until.UnixMilli(); ms < math.MaxInt64 {
		upper = wakeBound(ms + 1)
	}
	var out []store.Wakeup
	err := scan(s.db, lower, upper, func(k, v []byte) (bool, error) {
		ms, id, err := parseWakeKey(k)
		if err != nil {
			return false, err
		}
		if len(v) < 2 {
			return false, fmt.Errorf("pebblestore: malformed wake entry %x", v)
		}
		state, err := parseStateByte(v[0])
		if err != nil {
			return false, err
		}
		kind, err := parseKindByte(v[1])
		if err != nil {
			return false, err
		}
		// The app follows (entries written before it did have none).
		out = append(out, store.Wakeup{ID: id, At: time.UnixMilli(ms).UTC(), State: state, Kind: kind, App: string(v[2:])})
		return len(out) < limit, nil
	})
	return out, err
}

// Claimable implements [store.Store]. Times are compared at millisecond
// precision. It merges two orders: the p entries of the tasks waiting
// unwoken (ClaimableWaiting) and the w entries of app's scheduled pull tasks
// due by now, each of which is read to leave out those that wake for
// their deadline rather than their next attempt (they have p entries).
// The engine on one node asks ClaimableWaiting alone: its wheel brings
// the others due.
func (s *Store) Claimable(ctx context.Context, app string, now time.Time, limit int) ([]task.ID, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit <= 0 {
		return nil, nil
	}
	// The floor is taken before the snapshot: an entry committed after
	// the snapshot is noted after it, and keeps the floor from rising.
	lower, gen := s.pull.start(app)
	snap := s.db.NewSnapshot()
	defer snap.Close()
	waiting, first, err := claimableWaiting(snap, app, now, limit, lower)
	if err != nil {
		return nil, err
	}
	s.pull.raise(app, gen, first)
	woken, err := claimableWoken(snap, app, now, limit)
	if err != nil {
		return nil, err
	}
	// Both are in (next attempt ms, id) order and have no id in common.
	out := make([]task.ID, 0, min(limit, len(waiting)+len(woken)))
	for len(out) < limit && (len(waiting) > 0 || len(woken) > 0) {
		if len(woken) == 0 || len(waiting) > 0 && compareClaim(waiting[0], woken[0]) < 0 {
			out, waiting = append(out, waiting[0].id), waiting[1:]
		} else {
			out, woken = append(out, woken[0].id), woken[1:]
		}
	}
	return out, nil
}

// A claim is a claimable task's id and next attempt (Claimable's order).
type claim struct {
	ms int64
	id task.ID
}

func compareClaim(a, b claim) int {
	return cmp.Or(cmp.Compare(a.ms, b.ms), bytes.Compare(a.id[:], b.id[:]))
}

// ClaimableWaiting implements [store.WaitingClaimer]: Claimable of the
// tasks waiting unwoken alone, their p entries.
func (s *Store) ClaimableWaiting(ctx context.Context, app string, now time.Time, limit int) ([]task.ID, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if limit <= 0 {
		return nil, nil
	}
	lower, gen := s.pull.start(app)
	cs, first, err := claimableWaiting(s.db, app, now, limit, lower)
	if err != nil {
		return nil, err
	}
	s.pull.raise(app, gen, first)
	ids := make([]task.ID, len(cs))
	for i, c := range cs {
		ids[i] = c.id
	}
	return ids, nil
}

// claimableWaiting scans up to limit of app's p entries due by now from
// lower (its floor, pullfloor.go; nil: the start), and returns them and
// where its floor may rise to: the first entry found, or the scan's end.
func claimableWaiting(r reader, app string, now time.Time, limit int, lower []byte) ([]claim, []byte, error) {
	prefix := pullPrefix(app)
	upper := prefixEnd(prefix)
	if ms := now.UnixMilli(); ms < math.MaxInt64 {
		upper = appendMs(pullPrefix(app), ms+1)
	}
	if lower == nil {
		lower = prefix
	}
	var first []byte
	var out []claim
	err := scan(r, lower, upper, func(k, _ []byte) (bool, error) {
		if first == nil {
			first = bytes.Clone(k)
		}
		ms, id, err := parsePullKey(k, len(prefix))
		if err != nil {
			return false, err
		}
		out = append(out, claim{ms, id})
		return len(out) < limit, nil
	})
	if err != nil {
		return nil, nil, err
	}
	if first == nil {
		first = upper
	}
	return out, first, nil
}

// claimableWoken returns up to limit of app's scheduled pull tasks woken
// at their next attempt, due by now: the w entries of scheduled pull tasks
// of app, each read to keep those whose next attempt is their wake time.
func claimableWoken(r reader, app string, now time.Time, limit int) ([]claim, error) {
	upper := prefixEnd([]byte{prefixWake})
	if ms := now.UnixMilli(); ms < math.MaxInt64 {
		upper = wakeBound(ms + 1)
	}
	sb, _ := stateByte(task.Scheduled)
	kb, _ := kindByte("pull")
	var out []claim
	var readErr error
	err := scan(r, []byte{prefixWake}, upper, func(k, v []byte) (bool, error) {
		if len(v) < 2 || v[0] != sb || v[1] != kb || string(v[2:]) != app {
			return true, nil // not a scheduled pull task of app (Open gave every such entry its app)
		}
		ms, id, err := parseWakeKey(k)
		if err != nil {
			return false, err
		}
		t, err := get(r, id)
		if err != nil {
			readErr = fmt.Errorf("pebblestore: wake entry of %s: %w", id, err)
			return false, nil
		}
		if !waitsUnwoken(t) && t.State == task.Scheduled && t.App == app && t.Target.Kind() == "pull" {
			out = append(out, claim{ms, id})
		}
		return len(out) < limit, nil
	})
	return out, errors.Join(err, readErr)
}

// List implements [store.Store].
func (s *Store) List(ctx context.Context, app string, state task.State, after task.ID, limit int) ([]*task.Task, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	sb, err := stateByte(state)
	if limit <= 0 || err != nil {
		return nil, nil // no task is in an unknown state
	}
	prefix := appStatePrefix(app, sb)
	lower := prefix
	if !after.IsZero() {
		lower = successor(appStateKey(app, sb, after))
	}
	// A snapshot, so that the tasks read are those the index listed.
	snap := s.db.NewSnapshot()
	defer snap.Close()
	ids, err := scanIDs(snap, lower, prefixEnd(prefix), limit, func(k []byte) (task.ID, error) {
		return parseAppStateKey(k, len(prefix))
	})
	if err != nil {
		return nil, err
	}
	out := make([]*task.Task, 0, len(ids))
	for _, id := range ids {
		t, err := get(snap, id)
		if err != nil {
			return nil, fmt.Errorf("pebblestore: list entry of %s: %w", id, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// Sweep implements [store.Store]. FinishedAt and cutoff are compared at
// millisecond precision; the oldest finished tasks go first.
func (s *Store) Sweep(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	if limit <= 0 {
		return 0, nil
	}
	cutoffMs := cutoff.UnixMilli()
	ids, err := scanIDs(s.db, []byte{prefixFinished}, finishedBound(cutoffMs), limit, func(k []byte) (task.ID, error) {
		_, id, err := parseFinishedKey(k)
		return id, err
	})
	if err != nil || len(ids) == 0 {
		return 0, err
	}

	// Lock the id stripes, then the key stripes, each in ascending order.
	var idStripes []int
	for _, id := range ids {
		idStripes = append(idStripes, s.idStripe(id))
	}
	defer lockAll(&s.idLocks, idStripes)()

	// Re-read under the locks: an Update may have changed a task since the
	// scan.
	var doomed []*task.Task
	var keyStripes []int
	for _, id := range ids {
		t, err := get(s.db, id)
		if errors.Is(err, store.ErrNotFound) {
			continue // swept meanwhile
		}
		if err != nil {
			return 0, err
		}
		if !t.State.Final() || t.FinishedAt == nil || t.FinishedAt.UnixMilli() >= cutoffMs {
			continue
		}
		doomed = append(doomed, t)
		if t.Key != "" {
			keyStripes = append(keyStripes, s.keyStripe(t.App, t.Key))
		}
	}
	defer lockAll(&s.keyLocks, keyStripes)()

	b := s.db.NewBatch()
	defer b.Close()
	for _, t := range doomed {
		if err := writeTask(b, t, nil); err != nil {
			return 0, err
		}
	}
	if err := s.commit(b, s.wo); err != nil {
		return 0, fmt.Errorf("pebblestore: sweep: %w", err)
	}
	for _, t := range doomed {
		s.recent[s.idStripe(t.ID)].keep(t.ID, nil, time.Time{})
	}
	return len(doomed), nil
}

// lockAll locks the stripes of locks at the indexes idx, each once and in
// ascending order, and returns the function that unlocks them. It sorts idx.
func lockAll(locks *[stripes]stripe, idx []int) (unlock func()) {
	idx = lockStripes(locks, idx)
	return func() { unlockStripes(locks, idx) }
}

// lockStripes is lockAll without a closure (Create's, whose idx may live on
// the stack): it returns idx sorted and compacted, the stripes locked, for
// unlockStripes.
func lockStripes(locks *[stripes]stripe, idx []int) []int {
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		locks[i].Lock()
	}
	return idx
}

// unlockStripes unlocks what lockStripes locked.
func unlockStripes(locks *[stripes]stripe, idx []int) {
	for _, i := range idx {
		locks[i].Unlock()
	}
}

// Close implements [store.Store]. It waits for calls in flight to return.
func (s *Store) Close() (err error) {
	// First: calls from now on fail, stalled log writes give up (disk.go),
	// and the disk watch's reopen, which takes s.mu, ends.
	s.disk.close()
	// The calls in flight end at once, unless Pebble is stuck after a
	// failed write: then the store is left as a crash leaves it (the next
	// Open recovers it from its log), rather than Close waiting for ever.
	if !s.lockWithin(closeWait) {
		return fmt.Errorf("pebblestore: close: calls in flight did not end within %s (Pebble stuck after a failed write?); not closed: the next open recovers the store from its log", closeWait)
	}
	defer s.mu.Unlock()
	if s.mu.closed {
		return store.ErrClosed
	}
	s.mu.closed = true
	if aerr := s.closeAttemptLog(); aerr != nil {
		defer func() { err = errors.Join(err, fmt.Errorf("pebblestore: close the attempt log: %w", aerr)) }()
	}
	if s.mu.down != nil {
		return nil // closed by reopen
	}
	if s.disk.wedged.Load() {
		return fmt.Errorf("pebblestore: close: not closed, Pebble being stuck after a failed write: %v", s.disk.health())
	}
	done := make(chan error, 1)
	go func() { done <- s.db.Close() }()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil && s.disk.broken.Load() != nil {
			return fmt.Errorf("pebblestore: close after a failed write: %w (nothing acknowledged is lost: the next start recovers the store from its log)", err)
		}
		if err != nil {
			return fmt.Errorf("pebblestore: close: %w", err)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("pebblestore: close: Pebble did not close within %s (stuck after a failed write?); the next open recovers the store from its log", closeWait)
	}
}

// lockWithin locks s.mu, waiting at most d for the calls in flight (Close
// refuses new ones first).
func (s *Store) lockWithin(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !s.mu.TryLock() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// reader is what *pebble.DB and *pebble.Snapshot have in common that the
// store uses.
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

// get reads the task with id.
func get(r reader, id task.ID) (*task.Task, error) {
	v, closer, err := r.Get(taskKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("pebblestore: get %s: %w", id, err)
	}
	defer closer.Close()
	t, err := decodeRecord(v)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", id, err)
	}
	return t, nil
}

// getByKey reads the task that has the key entry kk.
func getByKey(r reader, kk []byte) (*task.Task, error) {
	id, ok, err := keyEntry(r, kk, "key")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, store.ErrNotFound
	}
	return keyTask(r, kk, id)
}

// keyTask reads the task with id, which the key entry kk holds.
func keyTask(r reader, kk []byte, id task.ID) (*task.Task, error) {
	t, err := get(r, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("pebblestore: key entry %q points to missing task %s", kk, id)
	}
	return t, err
}

// keyOwners looks up the key entries kks (nil ones skipped) in one pass and
// returns the ids they hold, by key entry; an entry not stored is not in
// the map. repeats says whether an entry is in kks more than once. One
// iterator seeking the entries in key order costs a fraction of a Get each
// (a fifth at a thousand, half at two): it keeps its place in the memtable
// and the sstables from one seek to the next.
func keyOwners(r reader, kks [][]byte) (owners map[string]task.ID, repeats bool, err error) {
	sorted := make([][]byte, 0, len(kks))
	for _, kk := range kks {
		if kk != nil {
			sorted = append(sorted, kk)
		}
	}
	slices.SortFunc(sorted, bytes.Compare)
	for i := 1; i < len(sorted) && !repeats; i++ {
		repeats = bytes.Equal(sorted[i-1], sorted[i])
	}
	it, err := r.NewIter(nil)
	if err != nil {
		return nil, false, fmt.Errorf("pebblestore: new iterator: %w", err)
	}
	owners = make(map[string]task.ID)
	for _, kk := range sorted {
		// The default comparer's prefix is the whole key: SeekPrefixGE
		// finds kk or nothing, and its bloom filters skip most sstables.
		if !it.SeekPrefixGE(kk) || !bytes.Equal(it.Key(), kk) {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return nil, false, fmt.Errorf("pebblestore: get key %q: %w", kk, err)
		}
		var id task.ID
		if len(v) != idLen {
			it.Close()
			return nil, false, fmt.Errorf("pebblestore: malformed key entry %q → %x", kk, v)
		}
		copy(id[:], v)
		owners[string(kk)] = id
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, false, fmt.Errorf("pebblestore: key lookups: %w", err)
	}
	return owners, repeats, nil
}

// keyEntry reads the key entry kk (of a task or a schedule): the id it
// holds, ok false when there is none. what names the entry in errors:
// "key", "schedule key".
func keyEntry(r reader, kk []byte, what string) (id task.ID, ok bool, err error) {
	v, closer, err := r.Get(kk)
	if errors.Is(err, pebble.ErrNotFound) {
		return id, false, nil
	}
	if err != nil {
		return id, false, fmt.Errorf("pebblestore: get %s %q: %w", what, kk, err)
	}
	n := copy(id[:], v)
	closer.Close()
	if n != idLen || len(v) != idLen {
		return id, false, fmt.Errorf("pebblestore: malformed %s entry %q → %x", what, kk, v)
	}
	return id, true, nil
}

// scanIDs returns the ids that parse reads from the keys in [lower,
// upper), the first limit (> 0) of them; on an error, those read before it.
func scanIDs(r reader, lower, upper []byte, limit int, parse func(k []byte) (task.ID, error)) ([]task.ID, error) {
	var ids []task.ID
	err := scan(r, lower, upper, func(k, _ []byte) (bool, error) {
		id, err := parse(k)
		if err != nil {
			return false, err
		}
		ids = append(ids, id)
		return len(ids) < limit, nil
	})
	return ids, err
}

// scan calls fn with each key and value in [lower, upper) until fn returns
// false or an error. The slices are valid only during the call.
func scan(r reader, lower, upper []byte, fn func(k, v []byte) (more bool, err error)) error {
	if upper != nil && string(lower) >= string(upper) {
		return nil
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("pebblestore: new iterator: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("pebblestore: scan: %w", err)
		}
		more, err := fn(it.Key(), v)
		if err != nil {
			it.Close()
			return err
		}
		if !more {
			break
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("pebblestore: scan: %w", err)
	}
	return nil
}

// entry is one index entry of a task.
type entry struct{ key, value []byte }

// maxEntries is the most index entries a task has (indexEntries).
const maxEntries = 5

// indexEntries appends to es the index entries of t (none when t is nil).
//
// Their keys and values are cut from one buffer, sized for all of them: a
// task written (created, leased, acked) costs one allocation here rather
// than one per key, and the entries go in the caller's es (an array of
// maxEntries on its stack). Each entry's slices are capped at their
// length, so an append to one cannot run into the next.
func indexEntries(t *task.Task, es []entry) ([]entry, error) {
	return indexEntriesIn(t, es, nil)
}

// indexEntriesIn is indexEntries with the buffer cut from arena (nil: one
// of its own): see keyArena.
func indexEntriesIn(t *task.Task, es []entry, arena *[]byte) ([]entry, error) {
	if t == nil {
		return es, nil
	}
	sb, err := stateByte(t.State)
	if err != nil {
		return nil, err
	}
	kind := t.Target.Kind()
	kb, err := kindByte(kind)
	if err != nil {
		return nil, err
	}
	wake := !t.WakeAt.IsZero()
	pull := waitsUnwoken(t)
	fin := t.State.Final() && t.FinishedAt != nil
	appKey := 1 + len(t.App) + 1 // prefix, app, separator
	size := appKey + 1 + idLen   // a <app> 0x00 <state> <id>
	if wake {
		size += 1 + msLen + idLen + 2 + len(t.App)
	}
	if pull {
		size += appKey + msLen + idLen
	}
	if t.Key != "" {
		size += appKey + len(t.Key) + idLen
	}
	if fin {
		size += 1 + msLen + idLen
	}
	buf := takeKeys(arena, size)
	// cut returns what was appended to buf since from, capped.
	cut := func(from int) []byte { return buf[from:len(buf):len(buf)] }
	buf = appendAppStateKey(buf, t.App, sb, t.ID)
	es = append(es, entry{key: cut(0)})
	if wake {
		from := len(buf)
		buf = appendWakeKey(buf, t.WakeAt.UnixMilli(), t.ID)
		k := cut(from)
		from = len(buf)
		buf = append(buf, sb, kb)
		buf = append(buf, t.App...)
		es = append(es, entry{k, cut(from)})
	}
	if pull {
		from := len(buf)
		buf = appendPullKey(buf, t.App, t.NextAttemptAt.UnixMilli(), t.ID)
		es = append(es, entry{key: cut(from)})
	}
	if t.Key != "" {
		from := len(buf)
		buf = appendKeyKey(buf, t.App, t.Key)
		k := cut(from)
		from = len(buf)
		buf = append(buf, t.ID[:]...)
		es = append(es, entry{k, cut(from)})
	}
	if fin {
		from := len(buf)
		buf = appendFinishedKey(buf, t.FinishedAt.UnixMilli(), t.ID)
		es = append(es, entry{key: cut(from)})
	}
	return es, nil
}

// writeTask adds to b the change from old to new: the record and the index
// entries that differ. old nil creates new; new nil deletes old.
func writeTask(b batchWriter, old, new *task.Task) error {
	var arena *[]byte
	if w, ok := b.(*sortedWrites); ok {
		arena = &w.keys
	}
	var oldEs, newEs [maxEntries]entry
	olds, err := indexEntriesIn(old, oldEs[:0], arena)
	if err != nil {
		return err
	}
	news, err := indexEntriesIn(new, newEs[:0], arena)
	if err != nil {
		return err
	}
	if new != nil {
		buf := recordBufs.Get().(*[]byte)
		rec, err := appendRecord((*buf)[:0], new)
		if err == nil {
			key := append(takeKeys(arena, 1+idLen), prefixTask)
			err = b.Set(append(key, new.ID[:]...), rec, nil) // copies rec
		}
		if cap(rec) <= maxPooledRecord {
			*buf = rec[:0]
			recordBufs.Put(buf)
		}
		if err != nil {
			return err
		}
	} else {
		if err := b.Delete(taskKey(old.ID), nil); err != nil {
			return err
		}
	}
	return writeEntries(b, olds, news)
}

// writeNew returns a batch of db that writes new tasks ts, as
// writeTask(b, nil, t) does each, but in key order (sortedWrites): the
// records in id order, then each kind of index entry in key order. New
// ids and their index entries mostly sort after the stored ones, next to
// each other, so each memtable insert is a short walk from the one before.
// The batch is made at its size once its writes are gathered, not grown
// as they are added.
func writeNew(db *pebble.DB, ts []*task.Task) (*pebble.Batch, error) {
	if len(ts) <= 1 {
		b := db.NewBatch()
		for _, t := range ts {
			if err := writeTask(b, nil, t); err != nil {
				b.Close()
				return nil, err
			}
		}
		return b, nil
	}
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(x, y *task.Task) int { return bytes.Compare(x.ID[:], y.ID[:]) })
	w := getSortedWrites()
	defer w.put()
	w.ops = slices.Grow(w.ops, len(ts)*4) // a keyed push task's: record, app/state, wake and key
	for i, t := range ts {
		if err := writeTask(w, nil, t); err != nil {
			return nil, err
		}
		if i == 0 {
			// The others' values take about what the first's did: room
			// for them all at once, rather than grown by doubling.
			w.vals = slices.Grow(w.vals, len(w.vals)*len(ts)*9/8)
		}
	}
	b := db.NewBatchWithSize(w.batchSize())
	if err := w.applyTo(b); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// writeEntries adds to b the change of index entries from olds to news:
// it deletes the old keys news lacks and sets the new entries olds lack or
// hold with another value.
func writeEntries(b batchWriter, olds, news []entry) error {
	for _, o := range olds {
		if !slices.ContainsFunc(news, func(n entry) bool { return string(n.key) == string(o.key) }) {
			if err := b.Delete(o.key, nil); err != nil {
				return err
			}
		}
	}
	for _, n := range news {
		i := slices.IndexFunc(olds, func(o entry) bool { return string(n.key) == string(o.key) })
		if i >= 0 && string(olds[i].value) == string(n.value) {
			continue
		}
		if err := b.Set(n.key, n.value, nil); err != nil {
			return err
		}
	}
	return nil
}

// checkTask refuses a task the layout can't hold.
func checkTask(t *task.Task) error {
	if t.ID.IsZero() {
		return errors.New("pebblestore: task without an id")
	}
	if strings.IndexByte(t.App, 0) >= 0 {
		return fmt.Errorf("pebblestore: task %s: app %q contains a NUL byte", t.ID, t.App)
	}
	if _, err := stateByte(t.State); err != nil {
		return err
	}
	_, err := kindByte(t.Target.Kind())
	return err
}
