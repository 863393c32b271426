package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/testkit"
	"github.com/toc-dev/toc/task"
)

type appView struct {
	MaxPayload int `json:"max_payload"`
	Rate       struct {
		MaxInFlight int `json:"max_in_flight"`
	} `json:"rate"`
}

func appSettings(t *testing.T, c *child, app string) appView {
	t.Helper()
	var v appView
	getJSON(t, c.url+"/v1/apps/"+app, &v)
	return v
}

// TestConfigReload: a changed config file applies without a restart and
// without dropping a task; a broken one is refused and the running settings
// stay; SIGHUP reloads at once.
func TestConfigReload(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "toc.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("apps:\n  shop:\n    max_payload: 10\n    target: {pull: {}}\n")
	c := startChild(t, filepath.Join(dir, "data"), "--config", cfg, "--config-check", "50ms")
	cl := c.client()
	ctx := context.Background()

	if v := appSettings(t, c, "shop"); v.MaxPayload != 10 {
		t.Fatalf("max_payload %d, want 10 from the file", v.MaxPayload)
	}
	big := client.ScheduleRequest{App: "shop", Delay: task.Duration(time.Hour), Payload: []byte(`"twenty bytes long!"`)}
	if _, _, err := cl.Schedule(ctx, big); err == nil || !strings.Contains(err.Error(), "413") {
		t.Fatalf("20-byte payload with max_payload 10: %v, want 413", err)
	}
	// A task scheduled before the reload, due after it.
	pending, _, err := cl.Schedule(ctx, client.ScheduleRequest{App: "shop", Delay: task.Duration(1500 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}

	write("apps:\n  shop:\n    max_payload: 100\n    target: {pull: {}}\n")
	testkit.WaitFor(t, 10*time.Second, "the reload", func() bool { return appSettings(t, c, "shop").MaxPayload == 100 })
	if _, _, err := cl.Schedule(ctx, big); err != nil {
		t.Fatalf("after the reload: %v", err)
	}

	// A broken file is refused; the settings stay.
	write("apps:\n  shop:\n    max_payload: -1\n")
	testkit.WaitFor(t, 10*time.Second, "a log line for the refused file", func() bool {
		return strings.Contains(c.stderr.String(), "config reload failed")
	})
	if v := appSettings(t, c, "shop"); v.MaxPayload != 100 {
		t.Fatalf("a broken file changed max_payload to %d", v.MaxPayload)
	}

	// SIGHUP reloads at once (the file check interval is irrelevant).
	write("apps:\n  shop:\n    max_payload: 100\n    target: {pull: {}}\n    rate: {max_in_flight: 7}\n")
	if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the SIGHUP reload", func() bool { return appSettings(t, c, "shop").Rate.MaxInFlight == 7 })

	// The task from before the reloads is still there and becomes claimable.
	got, err := cl.Claim(ctx, "shop", client.ClaimRequest{Max: 10, Lease: task.Duration(time.Minute), Wait: task.Duration(10 * time.Second)})
	if err != nil || len(got) == 0 || got[0].ID != pending.ID {
		t.Fatalf("claim after reloads: %v %v", got, err)
	}
}

// TestRefusesOpenListenerWithoutTokens: with no token configured toc serves
// only on loopback, unless --insecure.
func TestRefusesOpenListenerWithoutTokens(t *testing.T) {
	c, err := runChild(t, "serve", "--data", t.TempDir(), "--listen", "0.0.0.0:0")
	if err == nil || !strings.Contains(c, "refusing to serve") {
		t.Fatalf("serve on 0.0.0.0 without tokens: err %v, output %q", err, c)
	}
}
