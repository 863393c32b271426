package pebblestore

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/toc-dev/toc/internal/store"
)

var _ store.Checkpointer = (*Store)(nil)

// backupPrefix starts the name of the directory a checkpoint is made in,
// next to the store's: ".<dir>.backup-<random>".
func (s *Store) backupPrefix() string { return "." + s.fs.PathBase(s.dir) + ".backup-" }

// Checkpoint implements [store.Checkpointer] with Pebble's checkpoint: the
// WAL is synced (so the fire path's unsynced writes are in), then the
// sstables are hard-linked and the WAL, MANIFEST and OPTIONS copied into a
// fresh directory next to the store's, on the same file system, which is
// streamed to w as a tar and removed. Making the checkpoint holds up no
// write: Pebble only pauses its deletion of obsolete files meanwhile.
//
// The directory is ".<dir>.backup-<random>" beside Options.Dir. One left by
// a process that crashed during a checkpoint is removed by the next one.
func (s *Store) Checkpoint(ctx context.Context, w io.Writer) (store.BackupManifest, error) {
	var m store.BackupManifest
	s.backup.Lock()
	defer s.backup.Unlock()
	if err := s.enter(ctx); err != nil {
		return m, err
	}
	parent := s.fs.PathDir(s.dir)
	s.removeStaleCheckpoints(parent)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := s.fs.PathJoin(parent, s.backupPrefix()+hex.EncodeToString(rnd[:]))
	if err := s.fs.MkdirAll(tmp, 0o700); err != nil {
		s.leave()
		return m, fmt.Errorf("pebblestore: checkpoint: make a directory next to the store's (%s): %w", tmp, err)
	}
	defer func() { _ = s.fs.RemoveAll(tmp) }()
	dir := s.fs.PathJoin(tmp, "checkpoint")
	m.TakenAt = time.Now().UTC()
	err := s.db.Checkpoint(dir, pebble.WithFlushedWAL())
	s.leave() // the checkpoint's files no longer need the database
	if err != nil {
		return m, fmt.Errorf("pebblestore: checkpoint into %s: %w", dir, err)
	}
	return writeTar(ctx, s.fs, dir, w, m)
}

// removeStaleCheckpoints removes the checkpoint directories beside the
// store's. Under s.backup none is in use: a store's directory is locked
// by the one process that has it open.
func (s *Store) removeStaleCheckpoints(parent string) {
	names, err := s.fs.List(parent)
	if err != nil {
		return
	}
	for _, n := range names {
		if strings.HasPrefix(n, s.backupPrefix()) {
			_ = s.fs.RemoveAll(s.fs.PathJoin(parent, n))
		}
	}
}

// writeTar writes the tree under dir to w as a tar stream (names relative
// to dir, with "/"), then the manifest m counting it.
func writeTar(ctx context.Context, fs vfs.FS, dir string, w io.Writer, m store.BackupManifest) (store.BackupManifest, error) {
	tw := tar.NewWriter(w)
	var walk func(rel string) error
	walk = func(rel string) error {
		names, err := fs.List(fs.PathJoin(dir, rel))
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := ctx.Err(); err != nil {
				return err
			}
			r := path.Join(rel, n)
			p := fs.PathJoin(dir, r)
			fi, err := fs.Stat(p)
			if err != nil {
				return err
			}
			switch {
			case fi.IsDir():
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: r + "/", Mode: 0o755, ModTime: fi.ModTime()}); err != nil {
					return err
				}
				if err := walk(r); err != nil {
					return err
				}
			case fi.Mode().IsRegular():
				if err := copyFile(tw, fs, p, r, fi); err != nil {
					return err
				}
				m.Files++
				m.Bytes += fi.Size()
			default:
				return fmt.Errorf("%s is neither a file nor a directory (%s)", p, fi.Mode())
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return m, fmt.Errorf("pebblestore: checkpoint: %w", err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return m, err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: store.BackupManifestName, Mode: 0o644, Size: int64(len(b)), ModTime: m.TakenAt}); err != nil {
		return m, fmt.Errorf("pebblestore: checkpoint: %w", err)
	}
	if _, err := tw.Write(b); err != nil {
		return m, fmt.Errorf("pebblestore: checkpoint: %w", err)
	}
	if err := tw.Close(); err != nil {
		return m, fmt.Errorf("pebblestore: checkpoint: %w", err)
	}
	return m, nil
}

// copyFile writes the file at p as entry name. Checkpoint files do not
// change once made, so its size is the one stat gave.
func copyFile(tw *tar.Writer, fs vfs.FS, p, name string, fi os.FileInfo) error {
	f, err := fs.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, fi.Size()); err != nil {
		return fmt.Errorf("copy %s: %w", p, err)
	}
	return nil
}

// ErrInUse is CheckNotInUse's answer for a store a process has open.
var ErrInUse = errors.New("pebblestore: the store is in use by another process")

// CheckNotInUse returns ErrInUse (wrapped) when a process has the store
// in dir open, as a server does: a tool that reads a store on its own
// (toc export --data) checks first, and says so, rather than fail to open
// it.
func CheckNotInUse(dir string) error {
	l, err := pebble.LockDirectory(dir, vfs.Default)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInUse, err)
	}
	return l.Close()
}
