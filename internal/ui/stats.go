package ui

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/metrics"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/task"
)

// Stats is the answer of GET /v1/stats.
type Stats struct {
	// Apps has, for each app the token reaches that has tasks, its task
	// count in every state (zeros included).
	Apps map[string]map[task.State]int64 `json:"apps"`
	// Admin says whether the token reaches every app.
	Admin bool `json:"admin"`
	// Wheel and Ready are the engine's memory tiers, server-wide: tasks in
	// the timing wheel and fired tasks waiting for a worker.
	Wheel int `json:"wheel"`
	Ready int `json:"ready"`
	// Recent is the delivery lateness of each of the last 15 minutes'
	// seconds that had attempts, oldest first: server-wide for an admin
	// token, else of the apps the token reaches only.
	Recent []metrics.Second `json:"recent"`
}

// statsTimeout bounds the count behind one stats answer.
const statsTimeout = 10 * time.Second

// StatsHandler serves GET /v1/stats (mount it with httpapi.Config.Mount):
// task counts by app and state from counts, the engine's memory tiers from
// stats, and the recent lateness from m. An admin token (or any request when
// no token is configured) sees every app, an app token only its apps.
//
// counts is normally m itself, whose Counts reuses a count for a few
// seconds: the dashboard polls every 2 s and a count reads the whole index.
// stats may be nil.
func StatsHandler(m *metrics.Metrics, counts store.Counter, stats func() engine.Stats) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), statsTimeout)
		defer cancel()
		out := Stats{Apps: map[string]map[task.State]int64{}, Admin: httpapi.IsAdmin(r), Recent: []metrics.Second{}}
		if counts != nil {
			all, err := counts.Counts(ctx)
			if err != nil {
				writeError(w, r, err)
				return
			}
			for app, byState := range all {
				if !httpapi.CanAccess(r, app) {
					continue
				}
				c := make(map[task.State]int64, len(task.States))
				for _, s := range task.States {
					c[s] = byState[s]
				}
				out.Apps[app] = c
			}
		}
		if stats != nil {
			s := stats()
			out.Wheel, out.Ready = s.Wheel, s.Ready
		}
		if m != nil {
			rs := m.Recent()
			if !out.Admin {
				rs = m.RecentOf(func(app string) bool { return httpapi.CanAccess(r, app) })
			}
			if rs != nil {
				out.Recent = rs
			}
		}
		b, err := json.Marshal(out)
		if err != nil {
			writeError(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(append(b, '\n'))
	})
}

// writeError answers in the API's error shape.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code, msg := http.StatusInternalServerError, "internal", "internal error; the server log has the details"
	switch {
	case errors.Is(err, store.ErrClosed), errors.Is(err, context.DeadlineExceeded):
		status, code, msg = http.StatusServiceUnavailable, "not_ready", "counting the tasks failed: "+err.Error()
		w.Header().Set("Retry-After", "1")
	default:
		slog.ErrorContext(r.Context(), "stats failed", slog.String("error", err.Error()))
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
