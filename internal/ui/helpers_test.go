package ui_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/clock"
	"github.com/toc-dev/toc/internal/engine"
	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/metrics"
	"github.com/toc-dev/toc/internal/reqlog"
	"github.com/toc-dev/toc/internal/testkit"
	tkstack "github.com/toc-dev/toc/internal/testkit/stack"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// Tokens of the test servers: an admin, and one that reaches app shop.
const (
	adminToken = "admin-token"
	shopToken  = "shop-token"
)

func digest(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// stack is toc wired as the server wires it: engine over Pebble with the
// metrics' hooks, the API with the stats, metrics, dashboard and OpenAPI
// routes, behind the request-id middleware.
type stack struct {
	url  string
	eng  *engine.Engine
	m    *metrics.Metrics
	logs *testsvc.LockedBuffer
}

func startStack(t *testing.T, tokens bool) *stack {
	t.Helper()
	return startStackOn(t, tokens, nil)
}

// startStackOn is startStack on the clock clk (nil: the wall clock).
func startStackOn(t *testing.T, tokens bool, clk clock.Clock) *stack {
	t.Helper()
	logs := &testsvc.LockedBuffer{}
	log := slog.New(reqlog.NewHandler(slog.NewTextHandler(logs, nil)))
	var acc *httpapi.Access
	if tokens {
		var err error
		acc, err = httpapi.NewAccess([]string{digest(adminToken)}, map[string][]string{"shop": {digest(shopToken)}})
		if err != nil {
			t.Fatal(err)
		}
	}
	s := tkstack.Start(t, tkstack.Options{Logger: log, Metrics: true, Dashboard: true, Access: acc,
		Engine: func(c *engine.Config) { c.Clock = clk }})
	return &stack{url: s.URL, eng: s.Engine, m: s.Metrics, logs: logs}
}

func (s *stack) client(token string) *client.Client {
	return client.New(client.Config{BaseURL: s.url, Token: token})
}

// newReceiver is a webhook endpoint that fails (500) until told otherwise.
func newReceiver(t *testing.T, fail bool) *receiver {
	r := &receiver{testkit.NewReceiver(t)}
	r.setFail(fail)
	return r
}

type receiver struct{ *testkit.Receiver }

func (r receiver) setFail(fail bool) {
	if fail {
		r.Answer(http.StatusInternalServerError, "receiver is down for maintenance\n")
	} else {
		r.SetStatus(http.StatusNoContent)
	}
}

func (r receiver) target() task.Target { return r.Target() }

// waitState waits until the task is in state want.
func waitState(t *testing.T, c *client.Client, id task.ID, want task.State) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, "task "+id.String()+" to be "+string(want), func() bool {
		tk, err := c.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return tk.State == want
	})
}
