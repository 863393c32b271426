package cli

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/toc-dev/toc/internal/store"
)

const backupHelp = `
Has the server make a consistent copy of its embedded store while it goes
on serving, and writes it into DIR on this machine (an admin token's
command). Every task acknowledged before the backup began is in the copy.

DIR must not exist yet; missing parent folders are made. The copy is
written to DIR.partial and renamed to DIR once whole and synced to disk, so
a failed or interrupted backup (Ctrl-C, SIGTERM) leaves no DIR and removes
DIR.partial. A backup killed outright (SIGKILL) leaves DIR.partial, which
toc serve refuses to serve: remove it and take the backup again. The
command prints how many files and bytes it wrote.

To restore, start a server on the copy (or a copy of it):

  toc serve --data DIR

Tasks that came due since the backup fire at once, as after any downtime.
A cluster node answers 501: back up a cluster's SQL databases with their
own tools.

Example:
  toc backup --server http://toc.internal:7070 --to /backups/toc-2026-03-01
`

// runBackup is "toc backup --to DIR".
func runBackup(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "backup", backupHelp)
	conn := addConnFlags(fs)
	to := fs.String("to", "", "`directory` to write the copy into; must not exist (required)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := noArgs("backup", pos); err != nil {
		return err
	}
	if *to == "" {
		return usagef("backup: --to is required: a directory that does not exist yet")
	}
	dir := filepath.Clean(*to)
	partial := dir + ".partial"
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("backup: %s exists: give a directory that does not exist yet", dir)
	}
	if _, err := os.Lstat(partial); err == nil {
		return fmt.Errorf("backup: %s exists, left by a backup that was stopped: remove it, or give another --to", partial)
	}
	c, err := conn.client(e, "backup")
	if err != nil {
		return err
	}
	start := time.Now()
	body, err := c.Backup(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	if err := os.MkdirAll(filepath.Dir(partial), 0o700); err != nil {
		return fmt.Errorf("backup: make the parent folder of %s: %w", dir, err)
	}
	if err := os.Mkdir(partial, 0o700); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	m, err := unpackBackup(body, partial)
	if err == nil {
		err = syncDir(partial)
	}
	if err == nil {
		err = os.Rename(partial, dir)
	}
	if err != nil {
		// Interrupted (SIGINT, SIGTERM: ctx) or failed: the partial copy
		// goes. One left by a SIGKILL stays, and toc serve refuses it.
		if rerr := os.RemoveAll(partial); rerr != nil {
			return fmt.Errorf("backup: %w (and the incomplete copy %s could not be removed: %v; remove it)", err, partial, rerr)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("backup: stopped before the copy was whole, so %s was removed: %w", partial, err)
		}
		return fmt.Errorf("backup: %w", err)
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("backup: %s is written, but syncing its parent directory failed: %w", dir, err)
	}
	_, err = fmt.Fprintf(e.stdout, "backed up to %s: %d files, %s, taken at %s (in %s)\n",
		dir, m.Files, sizeText(m.Bytes), m.TakenAt.UTC().Format(time.RFC3339), time.Since(start).Round(time.Millisecond))
	return err
}

// maxManifest bounds the manifest entry read.
const maxManifest = 64 << 10

// unpackBackup writes the tar stream r into dir (which exists and is
// empty), each file synced, and returns the stream's manifest. It fails on
// a stream that ends without its manifest, has entries after it, or does
// not match it; and on an entry that is neither a file nor a directory or
// whose name would leave dir.
func unpackBackup(r io.Reader, dir string) (store.BackupManifest, error) {
	var m store.BackupManifest
	tr := tar.NewReader(r)
	files, manifest := 0, false
	var size int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, fmt.Errorf("read the backup stream: %w", err)
		}
		if manifest {
			return m, fmt.Errorf("the backup stream has an entry (%q) after its manifest", h.Name)
		}
		name, err := entryName(h.Name)
		if err != nil {
			return m, err
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		switch {
		case h.Typeflag == tar.TypeDir:
			if err := os.MkdirAll(p, 0o700); err != nil {
				return m, err
			}
			continue
		case h.Typeflag != tar.TypeReg:
			return m, fmt.Errorf("the backup stream has %q, which is not a regular file (type %q)", h.Name, h.Typeflag)
		case name == store.BackupManifestName:
			if h.Size > maxManifest {
				return m, fmt.Errorf("the backup's manifest is %d bytes", h.Size)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return m, fmt.Errorf("read the backup's manifest: %w", err)
			}
			if err := json.Unmarshal(b, &m); err != nil {
				return m, fmt.Errorf("the backup's manifest: %w", err)
			}
			if err := writeFile(p, strings.NewReader(string(b)), int64(len(b))); err != nil {
				return m, err
			}
			manifest = true
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return m, err
		}
		if err := writeFile(p, tr, h.Size); err != nil {
			return m, err
		}
		files++
		size += h.Size
	}
	switch {
	case !manifest:
		return m, errors.New("the backup stream ended without its manifest: it was cut short")
	case m.Files != files || m.Bytes != size:
		return m, fmt.Errorf("the backup stream had %d files of %d bytes, its manifest says %d of %d", files, size, m.Files, m.Bytes)
	}
	return m, nil
}

// entryName checks a tar entry's name: relative, slash-separated, and
// inside the directory it is unpacked into.
func entryName(name string) (string, error) {
	clean := path.Clean(strings.TrimSuffix(name, "/"))
	if name == "" || clean == "." || path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") ||
		strings.Contains(name, `\`) || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("the backup stream has an entry named %q, outside the directory", name)
	}
	return clean, nil
}

// writeFile creates the file at p (it must not exist) with size bytes
// from r, and syncs it.
func writeFile(p string, r io.Reader, size int64) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, r, size); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir syncs a directory, so that the entries made in it are on disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}

// sizeText writes a size in bytes for people: "3.4 MiB (3567890 bytes)".
func sizeText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	v, u := float64(n), 0
	for v >= unit && u < 4 {
		v /= unit
		u++
	}
	return fmt.Sprintf("%.1f %ciB (%d bytes)", v, "KMGT"[u-1], n)
}
