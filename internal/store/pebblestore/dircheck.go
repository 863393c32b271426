package pebblestore

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/toc-dev/toc/internal/store"
)

// ErrNotStore is Open's answer for a directory it will not open: files but
// no Pebble store (an incomplete backup copy, or some other program's
// files), or the partial copy of a stopped backup. Pebble would start a
// new, empty store there and delete the files it does not know.
var ErrNotStore = errors.New("pebblestore: not a whole store")

// PartialSuffix ends the name of the directory a backup is written into
// until it is whole (toc backup).
const PartialSuffix = ".partial"

// checkDir lets Open go on in a directory that does not exist, is empty,
// or holds a Pebble store; it refuses the others (ErrNotStore), naming
// what is missing:
//
//   - a backup's partial directory (PartialSuffix) without its completion
//     marker (store.BackupManifestName, the stream's last entry);
//   - files without Pebble's MANIFEST: the copy of a backup cut short
//     before its MANIFEST, or files toc did not write.
func checkDir(fs vfs.FS, dir string) error {
	names, err := fs.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pebblestore: open %s: %w", dir, err)
	}
	marker := slices.Contains(names, store.BackupManifestName)
	if strings.HasSuffix(fs.PathBase(dir), PartialSuffix) && !marker {
		return fmt.Errorf("%w: %s is the partial copy of a backup that was stopped: its completion marker %s is missing, so the copy is incomplete; toc will not serve it: take the backup again, then remove %s",
			ErrNotStore, dir, store.BackupManifestName, dir)
	}
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		return fmt.Errorf("pebblestore: open %s: %w", dir, err)
	}
	if desc.Exists {
		return nil
	}
	var foreign []string
	for _, n := range names {
		switch {
		case n == "LOCK", n == ReserveName, strings.HasPrefix(n, "OPTIONS-"), strings.HasPrefix(n, "marker.format-version."):
			// A store whose creation stopped before its MANIFEST.
		default:
			foreign = append(foreign, n)
		}
	}
	if len(foreign) == 0 {
		return nil
	}
	slices.Sort(foreign)
	missing := "Pebble's MANIFEST is missing"
	if !marker {
		missing += ", and so is a backup's completion marker " + store.BackupManifestName
	}
	return fmt.Errorf("%w: %s holds %d file(s) (%s) but no store: %s. If it is a backup copy, the copy is incomplete: take the backup again. toc will not start a new store over files it did not write: give an empty directory or a whole store",
		ErrNotStore, dir, len(foreign), strings.Join(foreign[:min(3, len(foreign))], ", ")+ellipsis(len(foreign) > 3), missing)
}

func ellipsis(more bool) string {
	if more {
		return ", …"
	}
	return ""
}
