package redisindex_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toc-dev/toc/internal/store/redisindex"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// commandsOf runs f and returns the commands Redis ran for it on keys under
// prefix, as MONITOR shows them: the client's and those its scripts ran
// (INFO commandstats counts both alike). Sentinels (ECHO) bracket f, so the
// lines between are f's, in order.
func commandsOf(t *testing.T, c redis.UniversalClient, prefix string, f func()) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", testsvc.RedisAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	if ok, err := rd.ReadString('\n'); err != nil || ok != "+OK\r\n" {
		t.Fatalf("MONITOR: %q, %v", ok, err)
	}
	until := func(mark string) []string {
		t.Helper()
		var lines []string
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("monitor: %v", err)
			}
			if strings.Contains(line, mark) {
				return lines
			}
			if strings.Contains(line, prefix) {
				lines = append(lines, strings.TrimSpace(line))
			}
		}
	}
	// MONITOR is on: the start mark is the first of this client's
	// commands to be shown.
	start, end := prefix+":start-mark", prefix+":end-mark"
	if err := c.Echo(ctx, start).Err(); err != nil {
		t.Fatal(err)
	}
	until(start)
	f()
	if err := c.Echo(ctx, end).Err(); err != nil {
		t.Fatal(err)
	}
	return until(end)
}

// roundTrips counts the client's commands and pipelines sent (each one
// round trip).
type roundTrips struct{ n int }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n++; return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n++; return next(ctx, cmds) }
}

// TestCommandsPerBatch: the fire path's Redis work for a batch costs a few
// commands per slot, not per task, and one round trip per call: creates
// mirrored (SettleMany) and promoted (AddMany), claimed (ClaimMany) and
// ended (Ended); the scripts run once for every slot on a standalone
// Redis.
func TestCommandsPerBatch(t *testing.T) {
	c, prefix := testsvc.Redis(t)
	x, err := redisindex.New(redisindex.Options{Client: c, Prefix: prefix, Slots: 8})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	rt := &roundTrips{}
	c.AddHook(rt)
	var g task.IDGenerator
	now := time.Now().Truncate(time.Millisecond)
	const slots, perSlot = 4, 25
	var ops []redisindex.Op
	var adds []redisindex.Added
	var cs []redisindex.Claim
	for i := range slots * perSlot {
		id := g.New(now, 0)
		ops = append(ops, redisindex.Op{App: "a", Slot: i % slots, ID: id, Action: redisindex.Retry, Score: now})
		adds = append(adds, redisindex.Added{App: "a", Slot: i % slots, ID: id, At: now})
		cs = append(cs, redisindex.Claim{App: "a", Slot: i % slots, ID: id, LeaseUntil: now.Add(time.Minute), Attempt: true})
	}
	// Register the app and load the scripts first.
	warm := g.New(now, 0)
	if _, err := x.AddMany(ctx, []redisindex.Added{{App: "a", Slot: 0, ID: warm, At: now}}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.ClaimMany(ctx, []redisindex.Claim{{App: "a", Slot: 0, ID: warm, LeaseUntil: now.Add(time.Minute)}}, now); err != nil {
		t.Fatal(err)
	}
	if err := x.SettleMany(ctx, []redisindex.Op{{App: "a", Slot: 0, ID: warm, Action: redisindex.Drop}}); err != nil {
		t.Fatal(err)
	}
	// step runs one call and checks its commands and round trips.
	step := func(name string, maxCommands int, f func() error) {
		t.Helper()
		rt.n = 0
		var ferr error
		cmds := commandsOf(t, c, prefix, func() { ferr = f() })
		if ferr != nil {
			t.Fatalf("%s: %v", name, ferr)
		}
		trips := rt.n - 2 // the two ECHO marks
		if len(cmds) > maxCommands || trips != 1 {
			t.Errorf("%s of %d tasks in %d slots: %d commands in %d round trips, want at most %d in 1:\n%s", name, slots*perSlot, slots, len(cmds), trips, maxCommands, strings.Join(cmds, "\n"))
		}
	}
	// One script call, and per slot three commands in it.
	step("SettleMany (retry)", 1+slots*3, func() error { return x.SettleMany(ctx, ops) })
	step("AddMany", 1+slots*3, func() error { _, err := x.AddMany(ctx, adds); return err })
	// One script call, and per slot ZPOPMIN (the members asked for are
	// the head of their StoreQueue) and ZADD; then HMGET and HSET of the
	// attempts hash, one for every slot.
	step("ClaimMany", 1+slots*2+2, func() error {
		held, err := x.ClaimMany(ctx, cs, now)
		for i, h := range held {
			if h != 1 {
				return fmt.Errorf("claim %d: %d, want attempt 1", i, h)
			}
		}
		return err
	})
	acks := make([]redisindex.Op, len(cs))
	for i, cl := range cs {
		acks[i] = redisindex.Op{App: "a", Slot: cl.Slot, ID: cl.ID, Action: redisindex.Ack}
	}
	// Per slot ZREM, then one HDEL, no script.
	step("Ended (ack)", slots+1, func() error { return x.Ended(ctx, acks) })

	// A lone attempt per slot at its queue's head: ZPOPMIN and ZADD; then
	// HMGET and HSET for all.
	var lone []redisindex.Claim
	for s := range slots {
		id := g.New(now, 0)
		if _, err := x.Add(ctx, "a", s, id, now); err != nil {
			t.Fatal(err)
		}
		lone = append(lone, redisindex.Claim{App: "a", Slot: s, ID: id, LeaseUntil: now.Add(time.Minute), Attempt: true})
	}
	step("ClaimMany of one per slot", 1+slots*2+2, func() error {
		held, err := x.ClaimMany(ctx, lone, now)
		for i, h := range held {
			if h != 1 {
				return fmt.Errorf("claim %d: %d, want attempt 1", i, h)
			}
		}
		return err
	})

	// Behind an earlier member not asked for: the pop puts that one back
	// (ZADD), then ZMSCORE and ZREM find the one asked for, ZADD; HMGET
	// and HSET for all.
	var behind []redisindex.Claim
	for s := range slots {
		first, id := g.New(now, 0), g.New(now, 0)
		if _, err := x.Add(ctx, "a", s, first, now.Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := x.Add(ctx, "a", s, id, now); err != nil {
			t.Fatal(err)
		}
		behind = append(behind, redisindex.Claim{App: "a", Slot: s, ID: id, LeaseUntil: now.Add(time.Minute), Attempt: true})
	}
	step("ClaimMany of one per slot behind another", 1+slots*5+2, func() error {
		held, err := x.ClaimMany(ctx, behind, now)
		for i, h := range held {
			if h != 1 {
				return fmt.Errorf("claim %d: %d, want attempt 1", i, h)
			}
		}
		return err
	})
}
