package pebblestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

var _ store.AttemptLog = (*Store)(nil)

// The attempt log (store.AttemptLog) is a plain file next to Pebble's,
// AttemptLogName, of 20-byte records: a task id and an attempt number
// (4 bytes big-endian). It is not in Pebble: a write Pebble does not sync
// stays in the process's buffer until a block fills, and a note must reach
// the operating system before its attempt is delivered. A record cut short
// (a crash during its write) is ignored, and so is a record of zeros (room
// not written yet).
//
// The notes go into a region of the file mapped into memory (MAP_SHARED,
// on Linux, on the operating system's file system): a note is a copy into
// the page cache, which a killed process leaves to the operating system
// as a write(2) does, with no system call. The region, mapRecords records
// after the ones a restart writes, is allocated on disk up front
// (fallocate), so that a full disk cannot fault a store into it (SIGBUS);
// when it is full, or could not be mapped, notes are appended after it by
// write(2). A process killed during a copy may leave a record half
// written, in its place: it names an attempt not sent yet, and reads back
// as an id no task has or a number no higher than the attempt's. Measured with toc bench --embedded --workload fire --n 100000
// --spread 0s: the write(2) per attempt cost about 4 µs of CPU per fire.

// AttemptLogName is the attempt log's file in the store's directory.
const AttemptLogName = "toc-attempts.log"

const attemptRecordLen = idLen + 4

// attemptLog is the log's open file, its mapped region, and its end.
type attemptLog struct {
	mu   sync.Mutex // held by the appends by write(2), a restart and Close
	f    vfs.File   // nil until RestartAttemptLog
	tail int64      // where the next write(2) appends: the file's end

	// The mapped region: notes take their room in it (used) holding mm
	// for reading; a restart and Close unmap it holding it for writing.
	mm     sync.RWMutex
	mapped []byte // the region, after the records written by the restart; nil: none
	whole  []byte // the mapping, from the file's start (unmapped as a whole)
	used   atomic.Int64
}

// mapRecords is how many notes the mapped region holds: 1.3 MB, more than
// the engine notes before it starts the log over (attemptLogMax, 50 000).
const mapRecords = 1 << 16

// errNoMap is mapNotes's error where no mapping is tried: a file system
// other than the operating system's, or a system other than Linux.
var errNoMap = errors.New("pebblestore: the attempt log is not mapped here")

// noteMapped copies the records of ids and ns into the mapped region and
// reports whether it did: false when there is no region or no room left.
func (l *attemptLog) noteMapped(ids []task.ID, ns []int) bool {
	n := int64(len(ids) * attemptRecordLen)
	l.mm.RLock()
	defer l.mm.RUnlock()
	if l.mapped == nil {
		return false
	}
	end := l.used.Add(n)
	if end > int64(len(l.mapped)) {
		return false
	}
	appendAttempts(l.mapped[end-n:end-n], ids, ns) // in place: the room is there
	return true
}

// unmapLocked drops the mapped region. l.mu is held.
func (l *attemptLog) unmapLocked() error {
	l.mm.Lock()
	defer l.mm.Unlock()
	whole := l.whole
	l.mapped, l.whole = nil, nil
	l.used.Store(0)
	if whole == nil {
		return nil
	}
	return unmapNotes(whole)
}

func appendAttempts(b []byte, ids []task.ID, ns []int) []byte {
	for i, id := range ids {
		b = append(b, id[:]...)
		b = binary.BigEndian.AppendUint32(b, uint32(ns[i]))
	}
	return b
}

// NoteAttempts implements [store.AttemptLog].
func (s *Store) NoteAttempts(ctx context.Context, ids []task.ID, ns []int) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if s.alog.noteMapped(ids, ns) {
		return nil
	}
	s.alog.mu.Lock()
	defer s.alog.mu.Unlock()
	if s.alog.f == nil {
		return errors.New("pebblestore: note attempts: the attempt log was not started (RestartAttemptLog)")
	}
	b := appendAttempts(nil, ids, ns)
	if _, err := s.alog.f.WriteAt(b, s.alog.tail); err != nil {
		return fmt.Errorf("pebblestore: note %d attempts: %w", len(ids), err)
	}
	s.alog.tail += int64(len(b))
	return nil
}

// NotedAttempts implements [store.AttemptLog].
func (s *Store) NotedAttempts(ctx context.Context) (map[task.ID]int, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	s.alog.mu.Lock()
	defer s.alog.mu.Unlock()
	noted := map[task.ID]int{}
	f, err := s.fs.Open(s.fs.PathJoin(s.dir, AttemptLogName))
	if errors.Is(err, os.ErrNotExist) {
		return noted, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pebblestore: read the attempt log: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("pebblestore: read the attempt log: %w", err)
	}
	for ; len(b) >= attemptRecordLen; b = b[attemptRecordLen:] {
		var id task.ID
		copy(id[:], b)
		if id == (task.ID{}) {
			continue // room in the mapped region not written to
		}
		noted[id] = max(noted[id], int(binary.BigEndian.Uint32(b[idLen:])))
	}
	return noted, nil
}

// RestartAttemptLog implements [store.AttemptLog]: the new log is written
// to a temporary file and renamed over the old one, so that a crash leaves
// one or the other.
func (s *Store) RestartAttemptLog(ctx context.Context, under func() ([]task.ID, []int)) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.alog.mu.Lock()
	defer s.alog.mu.Unlock()
	ids, ns := under()
	// Pebble's WAL is written in order: syncing a record syncs every
	// write before it, the outcomes of the attempts left out included.
	if err := s.db.LogData([]byte(AttemptLogName), pebble.Sync); err != nil {
		return fmt.Errorf("pebblestore: restart the attempt log: sync: %w", err)
	}
	name := s.fs.PathJoin(s.dir, AttemptLogName)
	f, err := s.fs.Create(name+".tmp", vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("pebblestore: restart the attempt log: %w", err)
	}
	b := appendAttempts(nil, ids, ns)
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return fmt.Errorf("pebblestore: restart the attempt log: %w", err)
	}
	// The region is mapped before the rename: a crash leaves the old log
	// or the new one with its room, zeros, which a read steps over.
	start, size := int64(len(b)), int64(mapRecords*attemptRecordLen)
	whole, err := mapNotes(f, start+size)
	if err != nil {
		if !errors.Is(err, errNoMap) {
			s.disk.log.Warn("attempt log: notes are appended by write(2), a system call each", slog.String("error", err.Error()))
		}
		whole, size = nil, 0
	}
	if err := s.fs.Rename(name+".tmp", name); err != nil {
		_ = f.Close()
		if whole != nil {
			_ = unmapNotes(whole)
		}
		return fmt.Errorf("pebblestore: restart the attempt log: %w", err)
	}
	// Notes in the old region finish before it goes (unmapLocked waits).
	if err := s.alog.unmapLocked(); err != nil {
		s.disk.log.Warn("attempt log: unmap the old log", slog.String("error", err.Error()))
	}
	if s.alog.f != nil {
		_ = s.alog.f.Close()
	}
	s.alog.f, s.alog.tail = f, start+size
	if whole != nil {
		s.alog.mm.Lock()
		s.alog.whole, s.alog.mapped = whole, whole[start:]
		s.alog.mm.Unlock()
	}
	return nil
}

// closeAttemptLog closes the log's file (Close).
func (s *Store) closeAttemptLog() error {
	s.alog.mu.Lock()
	defer s.alog.mu.Unlock()
	if s.alog.f == nil {
		return nil
	}
	uerr := s.alog.unmapLocked()
	err := s.alog.f.Close()
	s.alog.f = nil
	return errors.Join(uerr, err)
}
