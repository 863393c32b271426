package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/toc-dev/toc/internal/httpapi"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	tkstack "github.com/toc-dev/toc/internal/testkit/stack"
	"github.com/toc-dev/toc/task"
)

// fullStore refuses creates as a store on a full disk does.
type fullStore struct{ store.Store }

func (fullStore) Create(context.Context, []*task.Task) ([]store.CreateResult, error) {
	return nil, fmt.Errorf("pebblestore: create: %w", store.ErrDiskFull)
}

// TestDiskFullAnswers: a create the store refuses for lack of disk space
// is answered 507 disk_full saying nothing was stored, and /readyz is not
// ready with Config.Health's reason.
func TestDiskFullAnswers(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := pebblestore.Open(pebblestore.Options{Dir: t.TempDir(), Logger: log, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	health := func() error { return fmt.Errorf("%w: 0 bytes free in /data", store.ErrDiskFull) }
	hs := tkstack.Start(t, tkstack.Options{Store: fullStore{st}, Logger: log,
		API: func(c *httpapi.Config) { c.Health = health }})
	defer hs.Stop()

	status, body := do(t, "POST", hs.URL+"/v1/tasks", `{"app":"shop","delay":"1h","target":{"pull":{}}}`)
	e, _ := body["error"].(map[string]any)
	if status != http.StatusInsufficientStorage || e["code"] != "disk_full" || !strings.Contains(fmt.Sprint(e["message"]), "full: nothing was stored") {
		t.Errorf("create on a full disk: %d %v, want 507 disk_full saying the disk is full and nothing was stored", status, body)
	}
	status, body = do(t, "GET", hs.URL+"/readyz", "")
	e, _ = body["error"].(map[string]any)
	if status != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(e["message"]), "0 bytes free") {
		t.Errorf("/readyz on a full disk: %d %v, want 503 with Health's reason", status, body)
	}
}
