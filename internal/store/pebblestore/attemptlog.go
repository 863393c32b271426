package pebblestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

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
// the operating system before its attempt is delivered, at the cost of one
// write(2) per attempt. A record cut short (a crash during its write) is
// ignored.

// AttemptLogName is the attempt log's file in the store's directory.
const AttemptLogName = "toc-attempts.log"

const attemptRecordLen = idLen + 4

// attemptLog is the log's open file, appended to.
type attemptLog struct {
	mu sync.Mutex
	f  vfs.File // nil until RestartAttemptLog
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
	s.alog.mu.Lock()
	defer s.alog.mu.Unlock()
	if s.alog.f == nil {
		return errors.New("pebblestore: note attempts: the attempt log was not started (RestartAttemptLog)")
	}
	if _, err := s.alog.f.Write(appendAttempts(nil, ids, ns)); err != nil {
		return fmt.Errorf("pebblestore: note %d attempts: %w", len(ids), err)
	}
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
	if _, err := f.Write(appendAttempts(nil, ids, ns)); err != nil {
		_ = f.Close()
		return fmt.Errorf("pebblestore: restart the attempt log: %w", err)
	}
	if err := s.fs.Rename(name+".tmp", name); err != nil {
		_ = f.Close()
		return fmt.Errorf("pebblestore: restart the attempt log: %w", err)
	}
	if s.alog.f != nil {
		_ = s.alog.f.Close()
	}
	s.alog.f = f
	return nil
}

// closeAttemptLog closes the log's file (Close).
func (s *Store) closeAttemptLog() error {
	s.alog.mu.Lock()
	defer s.alog.mu.Unlock()
	if s.alog.f == nil {
		return nil
	}
	err := s.alog.f.Close()
	s.alog.f = nil
	return err
}
