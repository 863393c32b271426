package pebblestore

import (
	"context"
	"errors"
	"fmt"
	"github.com/toc-dev/toc/internal/lograte"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/toc-dev/toc/internal/store"
)

// A full disk is an answer, not a crash. The store keeps a reserve: a file
// of [Options.Reserve] bytes in its directory (ReserveName), as
// CockroachDB keeps a ballast. The disk is full when its file system has
// less than half the reserve free, or when a write meets ENOSPC. Then the
// store frees its reserve and refuses new tasks and schedules (Create,
// CreateSchedule: [store.ErrDiskFull]), while the writes that finish what
// it holds (outcomes, acks, cancels, updates, sweeps) go on in the room the
// reserve left. Once the file system has twice the reserve free, the store
// writes its reserve again and takes new tasks again, by itself.
//
// If the disk fills past the reserve (another program took it), a write
// of Pebble's write-ahead log or MANIFEST meets ENOSPC. Pebble cannot go
// on after such a write fails, so it does not fail: it waits for space
// (walWatch), while every new write is refused with ErrDiskFull; once it
// goes through, the writes under way end as if the disk had been slow.
// Another failure of the log (EIO) fails Pebble's commit for good: Pebble
// reports it through Logger.Fatalf, which panics; the store recovers that
// panic in the committing goroutine (commit), answers an error for that
// write and every later one, and opens its database again (Store.reopen),
// which drops what the failed writes left in memory (until then reads may
// see them). If Pebble is stuck (a commit that reached it after its log
// failed can hold its commit pipeline for good), Health says to restart
// toc, and Close leaves the store as a crash would: the next Open
// recovers it from its log. Pebble's background errors (a flush or
// compaction that failed, which Pebble retries at once) are counted,
// paced and logged at most once every backgroundLogEvery.
//
// Pebble's Open writes the log's replay out and waits for it, for ever on
// a full disk: Open (prepare) refuses at once when the free space, with
// the reserve's, cannot hold it.

// ReserveName is the reserve's file in the store's directory.
const ReserveName = "toc.reserve"

// ReserveDefault is the default [Options.Reserve]: 64 MiB, or a twentieth
// of the file system when that is less. Room for a memtable's flush
// (memTableSize) and many outcomes.
const ReserveDefault = 64 << 20

// DiskCheckDefault is the default [Options.DiskCheck]: how often the
// store reads its file system's free space.
const DiskCheckDefault = time.Second

// backgroundLogEvery bounds the log lines of Pebble's background errors
// and of the disk watch's own (errorLimited).
const backgroundLogEvery = 10 * time.Second

// closeWait bounds how long Store.reopen and Store.Close wait for Pebble
// to close (and Close for the calls in flight).
const closeWait = 5 * time.Second

// backgroundBackoff is the pause after a background error for lack of
// space (backgroundError).
const backgroundBackoff = 100 * time.Millisecond

// disk watches the store's file system and holds its reserve. Its fields
// after newDisk are set once; its state is atomic, as the write path reads
// it on every Create and Pebble calls it from its own goroutines.
type disk struct {
	fs    vfs.FS // the file system, without the ENOSPC wrapper
	dir   string
	path  string // the reserve's
	size  int64  // the reserve's size; 0 when the file system does not tell its usage
	every time.Duration
	log   *slog.Logger

	full     atomic.Bool
	avail    atomic.Uint64          // free bytes at the last check
	broken   atomic.Pointer[string] // why Pebble's commit failed for good
	stalls   atomic.Int64           // log and MANIFEST writes waiting for space (walWatch)
	closing  chan struct{}          // closed by close: calls fail
	giveUp   chan struct{}          // closed by close and StopWaiting: stalled writes give up
	giveOnce sync.Once
	wedged   atomic.Bool   // and Pebble cannot even be closed (Store.reopen)
	bgErrors atomic.Uint64 // Pebble's background errors

	errLog lograte.Limiter // errorLimited's, every backgroundLogEvery

	reopen func(context.Context) error // Store.reopen
	wake   chan struct{}               // capacity 1: a write met ENOSPC
	stop   context.CancelFunc
	done   chan struct{} // closed when run returns; nil when run never started
}

// newDisk sizes the reserve from opts and the file system.
func newDisk(opts Options, fs vfs.FS, log *slog.Logger) *disk {
	d := &disk{
		fs: fs, dir: opts.Dir, path: fs.PathJoin(opts.Dir, ReserveName),
		every: opts.DiskCheck, log: log, wake: make(chan struct{}, 1), closing: make(chan struct{}), giveUp: make(chan struct{}),
		errLog: lograte.Limiter{Every: backgroundLogEvery},
	}
	if d.every <= 0 {
		d.every = DiskCheckDefault
	}
	if opts.Reserve < 0 {
		return d
	}
	u, err := fs.GetDiskUsage(opts.Dir)
	if err != nil {
		return d // vfs.NewMem and the like: no reserve, no checks
	}
	d.size = opts.Reserve
	if d.size == 0 {
		d.size = min(ReserveDefault, int64(u.TotalBytes/20))
	}
	return d
}

// minFree is the free space under which the disk is full.
func (d *disk) minFree() uint64 { return uint64(d.size / 2) }

// prepare runs before Pebble opens the store. Pebble's Open replays the
// write-ahead log into an sstable and waits until that is written,
// retrying for ever on a full disk: so prepare fails at once when the free
// space, with the reserve's, cannot hold the log's replay; it frees the
// reserve and starts full when the free space alone cannot; it writes the
// reserve when it is missing and there is room.
func (d *disk) prepare() error {
	if d.size == 0 {
		return nil
	}
	u, err := d.fs.GetDiskUsage(d.dir)
	if err != nil {
		return nil
	}
	d.avail.Store(u.AvailBytes)
	_, statErr := d.fs.Stat(d.path)
	has := statErr == nil
	room := u.AvailBytes
	if has {
		room += uint64(d.size)
	}
	wal := d.walBytes()
	need := wal + d.minFree()
	switch {
	case room < need:
		return fmt.Errorf("%w: the file system of %s has %d bytes free (%d with toc's reserve) and toc needs %d to start (its write-ahead log holds %d): free space there and start again",
			store.ErrDiskFull, d.dir, u.AvailBytes, room, need, wal)
	case u.AvailBytes < need:
		d.enterFull(fmt.Sprintf("%d bytes free at start", u.AvailBytes))
	case !has && u.AvailBytes >= uint64(d.size)+need:
		if err := d.writeReserve(); err != nil {
			d.log.Warn("write the store's disk reserve", slog.String("file", d.path), slog.String("error", err.Error()))
		}
	case !has:
		d.enterFull(fmt.Sprintf("%d bytes free at start, too few for the reserve", u.AvailBytes))
	}
	return nil
}

// walBytes is the size of the write-ahead log files in the store's
// directory: what Pebble's Open writes out again.
func (d *disk) walBytes() uint64 {
	names, err := d.fs.List(d.dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, name := range names {
		if !strings.HasSuffix(name, ".log") {
			continue
		}
		if fi, err := d.fs.Stat(d.fs.PathJoin(d.dir, name)); err == nil {
			n += uint64(fi.Size())
		}
	}
	return n
}

// start runs the checks until stop. The free space has no event to wait
// on, so the disk is read every d.every; a write that meets ENOSPC wakes
// it at once.
func (d *disk) start() {
	if d.size == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.stop, d.done = cancel, make(chan struct{})
	go func() {
		defer close(d.done)
		t := time.NewTicker(d.every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-d.wake:
			}
			d.check(ctx)
		}
	}()
}

// close stops the checks and waits for them; stalled writes give up.
func (d *disk) close() {
	select {
	case <-d.closing:
	default:
		close(d.closing)
	}
	d.stopWaiting()
	if d.done != nil {
		d.stop()
		<-d.done
	}
}

// check reads the free space: under minFree the disk is full; at twice
// the reserve free again, a store whose write-ahead log failed is opened
// again, the reserve is written and new tasks are taken.
func (d *disk) check(ctx context.Context) {
	u, err := d.fs.GetDiskUsage(d.dir)
	if err != nil {
		return
	}
	d.avail.Store(u.AvailBytes)
	if msg := d.broken.Load(); msg != nil && !d.wedged.Load() && u.AvailBytes >= 2*uint64(d.size)+d.walBytes() && d.reopen != nil {
		if err := d.reopen(ctx); err != nil {
			d.errorLimited("reopen the store after its failed write", err)
			return
		}
		d.broken.Store(nil)
		d.log.Info("disk space is back: the store was opened again after its failed write", slog.String("dir", d.dir), slog.String("failed", *msg))
	}
	switch full := d.full.Load(); {
	case !full && u.AvailBytes < d.minFree():
		d.enterFull(fmt.Sprintf("%d bytes free", u.AvailBytes))
	case full && u.AvailBytes >= 2*uint64(d.size):
		if err := d.writeReserve(); err != nil {
			d.errorLimited("disk still full: write the store's reserve "+d.path, err)
			return
		}
		if u, err := d.fs.GetDiskUsage(d.dir); err == nil {
			d.avail.Store(u.AvailBytes)
		}
		d.full.Store(false)
		d.log.Info("disk space is back: the store takes new tasks again", slog.String("dir", d.dir), slog.Uint64("bytes_free", d.avail.Load()))
	}
}

// enterFull frees the reserve and marks the disk full. The reserve goes
// first: a write that met ENOSPC is tried again once enterFull returns.
func (d *disk) enterFull(why string) {
	err := d.fs.Remove(d.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Error("free the store's disk reserve", slog.String("file", d.path), slog.String("error", err.Error()))
	}
	if d.full.Swap(true) {
		return
	}
	d.log.Error("disk full: new tasks are refused (507) until space is freed; deliveries and their outcomes go on in the reserve",
		slog.String("dir", d.dir), slog.String("why", why), slog.Int64("reserve_bytes", d.size))
}

// onENOSPC is the ENOSPC wrapper's callback (vfs.OnDiskFull): Pebble's
// writes wait while it runs, then the one that failed is tried once more,
// in the room the reserve leaves.
func (d *disk) onENOSPC() {
	if d.size > 0 { // else no reserve, and no check that would see space back
		d.enterFull("a write met ENOSPC")
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// writeReserve writes the reserve file. On Linux its blocks are
// allocated at once (fallocate, keeping the size: ls shows 0 bytes, du
// the reserve); elsewhere it is written in full (zeros, synced).
func (d *disk) writeReserve() (err error) {
	f, err := d.fs.Create(d.path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = d.fs.Remove(d.path)
		}
	}()
	if runtime.GOOS == "linux" {
		if err := f.Preallocate(0, d.size); err == nil || isENOSPC(err.Error()) {
			return err
		}
	}
	buf := make([]byte, 1<<20)
	for left := d.size; left > 0; left -= int64(len(buf)) {
		if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			return err
		}
	}
	return f.Sync()
}

// fatal records a Pebble fatal error (Logger.Fatalf).
func (d *disk) fatal(msg string) {
	if d.broken.CompareAndSwap(nil, &msg) {
		d.log.Error(msg, slog.String("hint", "the store refuses writes until it is opened again, by itself once space is freed"))
	}
	if isENOSPC(msg) {
		d.onENOSPC()
	}
}

// backgroundError counts and logs (rate-limited) an error of Pebble's
// background work. Pebble retries a failed flush or compaction at once, so
// on a full disk this is called hundreds of times a second.
func (d *disk) backgroundError(err error) {
	d.bgErrors.Add(1)
	if isENOSPC(err.Error()) {
		d.onENOSPC()
		// Pebble retries a failed flush or compaction at once, without a
		// pause, and calls this with its mutex held: the pause slows the
		// retries down from hundreds a second (a core spinning) to ten.
		time.Sleep(backgroundBackoff)
	}
	d.errorLimited("pebble: background error", err)
}

// errorLimited logs msg and err at most once every backgroundLogEvery,
// with the number of lines left out since the last.
func (d *disk) errorLimited(msg string, err error) {
	d.errLog.Log(d.log, slog.LevelError, msg, err)
}

// health is nil while the store takes every write, or says why not.
func (d *disk) health() error {
	if msg := d.broken.Load(); msg != nil {
		if d.wedged.Load() {
			return fmt.Errorf("%w: a write of the store failed (%s) and left Pebble stuck; the store refuses writes: restart toc (after freeing space in %s)", store.ErrDiskFull, *msg, d.dir)
		}
		if isENOSPC(*msg) {
			return fmt.Errorf("%w: a write of the store failed (%s); the store refuses writes until it is opened again, by itself once %d bytes are free in %s (or restart toc)", store.ErrDiskFull, *msg, 2*d.size, d.dir)
		}
		return fmt.Errorf("pebblestore: a write of the store failed (%s); the store refuses writes until it is opened again, which it tries by itself (or restart toc)", *msg)
	}
	if d.stalls.Load() > 0 {
		return fmt.Errorf("%w: the disk of %s is full, the reserve used up: every write is refused, and the writes under way wait, until space is freed (toc goes on by itself then)", store.ErrDiskFull, d.dir)
	}
	if d.full.Load() {
		return fmt.Errorf("%w: %d bytes free in %s (under %d); new tasks are refused until %d are free, and taken again by themselves",
			store.ErrDiskFull, d.avail.Load(), d.dir, d.minFree(), 2*d.size)
	}
	return nil
}

// isENOSPC reports whether msg (an error's text: Pebble's fatal paths
// format errors with %v) says the disk is full.
func isENOSPC(msg string) bool {
	return strings.Contains(msg, syscall.ENOSPC.Error())
}

// fatalPanic is what pebbleLogger.Fatalf panics with; commit recovers it.
type fatalPanic struct{ msg string }

// commit commits b unless an earlier commit failed for good. A fatal
// commit error (Pebble's Logger.Fatalf, which panics) is recovered here,
// in the goroutine that committed, and returned.
func (s *Store) commit(b *pebble.Batch, wo *pebble.WriteOptions) (err error) {
	if s.disk.broken.Load() != nil || s.disk.stalls.Load() > 0 {
		return s.disk.health()
	}
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		switch v := r.(type) {
		case fatalPanic:
		case error:
			// Pebble's commitWrite panics with the write-ahead log's error
			// when the log failed before this batch was written to it
			// (its sticky error reaches writers a block late).
			s.disk.fatal("pebble: write-ahead log: " + v.Error())
		default:
			panic(r)
		}
		err = s.disk.health()
	}()
	err = b.Commit(wo)
	if err != nil && isENOSPC(err.Error()) && !errors.Is(err, store.ErrDiskFull) {
		err = fmt.Errorf("%w: %w", store.ErrDiskFull, err)
	}
	return err
}

// refuseNew fails a write of new tasks or schedules while the disk is
// full.
func (s *Store) refuseNew() error {
	if s.disk.full.Load() || s.disk.broken.Load() != nil || s.disk.stalls.Load() > 0 {
		if err := s.disk.health(); err != nil {
			return err
		}
	}
	return nil
}

// Health is nil while the store takes every write; else it says why not
// and what to do ([store.ErrDiskFull] when the disk is full). /readyz
// answers it.
func (s *Store) Health() error { return s.disk.health() }

// DiskFull reports whether the store refuses new tasks for lack of disk
// space (or because a write failed for good).
func (s *Store) DiskFull() bool {
	return s.disk.full.Load() || s.disk.broken.Load() != nil || s.disk.stalls.Load() > 0
}

// BackgroundErrors is the number of Pebble's background errors (failed
// flushes and compactions) since Open.
func (s *Store) BackgroundErrors() uint64 { return s.disk.bgErrors.Load() }

// reopen closes the database, whose write-ahead log failed for good, and
// opens it again (disk.check, once space is back). It waits for the calls
// in flight (new ones are refused meanwhile), at most 1s: a commit stuck
// in a pipeline Pebble gave up on would hold s.mu for ever.
func (s *Store) reopen(ctx context.Context) error {
	s.reopening.Store(true)
	defer s.reopening.Store(false)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for tries := 0; !s.mu.TryLock(); tries++ {
		if tries == 100 {
			return errors.New("pebblestore: reopen: calls in flight did not end within 1s; trying again later")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	defer s.mu.Unlock()
	if s.mu.closed {
		return store.ErrClosed
	}
	if s.mu.down == nil {
		// A commit that reached Pebble after its log failed can hold
		// Pebble's commit pipeline for good, and Close waits for it: then
		// the store stays as it is (reads go on), and toc must restart.
		closed := make(chan error, 1)
		old := s.db
		go func() { closed <- old.Close() }()
		t := time.NewTimer(closeWait)
		defer t.Stop()
		select {
		case err := <-closed:
			if err != nil {
				s.disk.log.Warn("close the store after its failed write", slog.String("error", err.Error()))
			}
		case <-t.C:
			s.disk.wedged.Store(true)
			return errors.New("pebblestore: reopen: Pebble's commit pipeline is stuck after the failed write: restart toc")
		}
		s.mu.down = fmt.Errorf("%w: the store is being opened again after a failed write", store.ErrDiskFull)
		if ctx.Err() != nil {
			return ctx.Err() // closing: closed already
		}
	}
	s.mu.down = fmt.Errorf("%w: the store is being opened again after a failed write", store.ErrDiskFull)
	// Pebble's Open waits until the log's replay is written, for ever if
	// the disk fills again meanwhile: Close (ctx) does not wait for it.
	type opened struct {
		db  *pebble.DB
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		db, err := s.openDB()
		ch <- opened{db, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			s.mu.down = fmt.Errorf("%w: the store could not be opened again after a failed write (%v): restart toc", store.ErrDiskFull, r.err)
			return r.err
		}
		s.db, s.mu.down = r.db, nil
		return nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.db != nil {
				_ = r.db.Close()
			}
		}()
		return ctx.Err()
	}
}

// walWatch wraps the file system Pebble writes through. Pebble cannot
// go on after a write of its write-ahead log or its MANIFEST fails: the
// log keeps the error, and a commit that reaches Pebble after it can leave
// Pebble's commit pipeline locked for good; a MANIFEST write that fails
// ends the process (Logger.Fatalf on a background goroutine). So such a
// write that meets ENOSPC, after the reserve was freed, is not failed: it
// waits for space (disk.stall), tried again every stallRetry, while the
// store refuses every new write with store.ErrDiskFull; once it goes
// through, the writes under way end as if the disk had been slow, and the
// store takes writes again. Only Close ends the wait, with the error.
// Another error of these files marks the store broken (disk.fatal) before
// Pebble says so.
type walWatch struct {
	vfs.FS
	d *disk
}

func (w walWatch) Unwrap() vfs.FS { return w.FS }

func (w walWatch) watch(name string, f vfs.File, err error) (vfs.File, error) {
	base := w.FS.PathBase(name)
	if err != nil || !(strings.HasSuffix(base, ".log") || strings.HasPrefix(base, "MANIFEST-")) {
		return f, err
	}
	return walFile{File: f, d: w.d, name: name}, nil
}

func (w walWatch) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := w.FS.Create(name, c)
	return w.watch(name, f, err)
}

func (w walWatch) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := w.FS.ReuseForWrite(oldname, newname, c)
	return w.watch(newname, f, err)
}

func (w walWatch) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := w.FS.OpenReadWrite(name, c, opts...)
	return w.watch(name, f, err)
}

// walFile is a write-ahead log or MANIFEST file (walWatch).
type walFile struct {
	vfs.File
	d    *disk
	name string
}

// again reports whether an operation that failed with err is to be tried
// again, after waiting for space; it reports other errors (and ENOSPC once
// the store closes) to the disk watch.
func (f walFile) again(op string, err error, stalled *bool) bool {
	if err == nil {
		return false
	}
	if isENOSPC(err.Error()) {
		if !*stalled {
			*stalled = true
			f.d.stalls.Add(1)
			f.d.onENOSPC()
		}
		if f.d.stall() {
			return true
		}
	}
	f.d.fatal(fmt.Sprintf("pebble: %s %s: %v", op, f.name, err))
	return false
}

func (f walFile) unstall(stalled bool) {
	if stalled {
		f.d.stalls.Add(-1)
	}
}

func (f walFile) Write(p []byte) (int, error) {
	var stalled bool
	defer func() { f.unstall(stalled) }()
	n, err := f.File.Write(p)
	for f.again("write", err, &stalled) {
		var m int
		m, err = f.File.Write(p[n:])
		n += m
	}
	return n, err
}

func (f walFile) WriteAt(p []byte, off int64) (int, error) {
	var stalled bool
	defer func() { f.unstall(stalled) }()
	n, err := f.File.WriteAt(p, off)
	for f.again("write", err, &stalled) {
		var m int
		m, err = f.File.WriteAt(p[n:], off+int64(n))
		n += m
	}
	return n, err
}

func (f walFile) Sync() error {
	var stalled bool
	defer func() { f.unstall(stalled) }()
	err := f.File.Sync()
	for f.again("sync", err, &stalled) {
		err = f.File.Sync()
	}
	return err
}

func (f walFile) SyncData() error {
	var stalled bool
	defer func() { f.unstall(stalled) }()
	err := f.File.SyncData()
	for f.again("sync", err, &stalled) {
		err = f.File.SyncData()
	}
	return err
}

func (f walFile) SyncTo(length int64) (bool, error) {
	var stalled bool
	defer func() { f.unstall(stalled) }()
	full, err := f.File.SyncTo(length)
	for f.again("sync", err, &stalled) {
		full, err = f.File.SyncTo(length)
	}
	return full, err
}

// stallRetry is how often a log or MANIFEST write waiting for space is
// tried again (walWatch).
const stallRetry = 100 * time.Millisecond

// stopWaiting makes log writes waiting for space give up.
func (d *disk) stopWaiting() { d.giveOnce.Do(func() { close(d.giveUp) }) }

// StopWaiting makes the writes that wait for disk space (the disk full
// past the reserve) give up and fail, as Close does: a server calls it
// when it begins to shut down, so that no request or delivery waits for
// space past the shutdown timeout. The store is then left to Close.
func (s *Store) StopWaiting() { s.disk.stopWaiting() }

// stall waits stallRetry for space, and reports whether to try again:
// false once the store closes or StopWaiting was called.
func (d *disk) stall() bool {
	t := time.NewTimer(stallRetry)
	defer t.Stop()
	select {
	case <-d.giveUp:
		return false
	case <-t.C:
		return true
	}
}
