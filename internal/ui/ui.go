// Package ui is toc's dashboard: a page for the people who run toc, served
// from files embedded in the binary (plain HTML, CSS and JavaScript, no
// build step, nothing fetched from elsewhere, so it works offline).
//
// The page holds no data: it calls the API from the browser with the
// bearer token the operator types in (kept in the browser's localStorage),
// so [Handler] can be served to anyone (httpapi.Config.Public) while
// [StatsHandler], which the page polls, sits behind the API's
// authentication (httpapi.Config.Mount) and shows each token only its
// apps.
//
// What the page shows: tasks by state and app (every 2 s), delivery
// lateness over the last minutes, one app's settings, its tasks in a state
// (dead letters first) with Retry, Retry all and Cancel, and its recurring
// schedules (rule, zone, state, next and last occurrence) with Pause and
// Resume, and any task by id or by app and key with its history.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// file is an embedded asset ready to serve.
type file struct {
	body  []byte
	etag  string
	ctype string
}

var files = func() map[string]file {
	out := map[string]file{}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ctype := mime.TypeByExtension(path.Ext(p))
		if ctype == "" {
			ctype = http.DetectContentType(b)
		}
		out[strings.TrimPrefix(p, "assets/")] = file{body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, ctype: ctype}
		return nil
	})
	if err != nil {
		panic("ui: read embedded assets: " + err.Error())
	}
	return out
}()

// csp keeps the page to its own files: no inline script, nothing from
// another origin, not framed.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the dashboard under /ui/ (the page at /ui/). Mount it as
// "GET /ui/". Assets are revalidated on every load (ETag), so a new binary's
// page is picked up at once.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := strings.CutPrefix(r.URL.Path, "/ui/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		if name == "" {
			name = "index.html"
		}
		f, ok := files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", f.ctype)
		h.Set("ETag", f.etag)
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
	})
}
