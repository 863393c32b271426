package openapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"testing"

	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/reqlog"
	"github.com/toc-dev/toc/internal/testkit"
	tkstack "github.com/toc-dev/toc/internal/testkit/stack"
)

// Tokens of the test server: an admin, and one that reaches app shop.
const (
	adminToken = "admin-token"
	shopToken  = "shop-token"
)

func digest(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// mounted are the routes the server adds to httpapi's own (Config.Mount and
// Config.Public), as wired here. The dashboard's assets (GET /ui/) are not
// API and not in the spec.
var mounted = []string{"GET /v1/stats", "GET /metrics", "GET /openapi.json"}

// stack is toc wired as the server wires it.
type stack struct {
	url  string
	eng  *engine.Engine
	stop func()
}

func startStack(t *testing.T) *stack {
	t.Helper()
	log := slog.New(reqlog.NewHandler(slog.NewTextHandler(io.Discard, nil)))
	acc, err := httpapi.NewAccess([]string{digest(adminToken)}, map[string][]string{"shop": {digest(shopToken)}})
	if err != nil {
		t.Fatal(err)
	}
	s := tkstack.Start(t, tkstack.Options{Logger: log, Metrics: true, Dashboard: true, Access: acc})
	// stop stops the engine only: the API goes on answering.
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), tkstack.StopTimeout)
		defer cancel()
		if err := s.Engine.Stop(ctx); err != nil {
			t.Errorf("stop engine: %v", err)
		}
	}
	return &stack{url: s.URL, eng: s.Engine, stop: stop}
}

// receiver answers every push with status.
func receiver(t *testing.T, status int) string {
	r := testkit.NewReceiver(t)
	r.SetStatus(status)
	return r.HookURL()
}
