// Package cluster makes a toc process one node of a cluster: many stateless
// nodes over a sharded SQL task library (authoritative) and Redis (the hot
// tier of tasks due within the hot window).
//
// # What a node does
//
//   - Membership: it heartbeats its member name (the engine's boot id) into a
//     sorted set scored by expiry; the live members are those not expired.
//   - Ownership: Redis slots and SQL shards are split among the live members
//     by rendezvous hashing; when the members change, each node recomputes
//     and rescans. Correctness never depends on ownership being exclusive:
//     claims are atomic Lua scripts, and the SQL row, locked for every
//     transition, is what decides.
//   - Promotion: for the SQL shards it owns, it moves tasks that enter the
//     hot window into Redis, from a cursor, and periodically rescans the
//     whole window (the repair scan) to restore anything a crash or a Redis
//     restart lost between the SQL commit and the Redis write.
//   - Timing: it is the engine's Index: the engine's wheel is filled from the
//     node's slots, and every write is mirrored to Redis and announced on a
//     pub/sub channel so the owner of the slot puts it in its wheel at once.
//     No node polls for due tasks.
package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/redisindex"
	"github.com/toc-dev/toc/task"
)

// Defaults of Config.
const (
	HeartbeatDefault   = 500 * time.Millisecond
	MemberTTLDefault   = 2 * time.Second
	RepairEveryDefault = 30 * time.Second
	NearDefault        = 30 * time.Second
	AckDelayDefault    = 200 * time.Millisecond
)

// Shards is the SQL store as the promoter sees it: its shards, each scanned
// on its own in wake order, with App and Key filled.
type Shards interface {
	Shards() int
	ShardWakeups(ctx context.Context, shard int, after store.Cursor, until time.Time, limit int) ([]store.Wakeup, error)
}

// Config configures a Node.
type Config struct {
	Redis redis.UniversalClient // required
	Index *redisindex.Index     // required
	SQL   Shards                // required
	// Prefix of the membership keys; use the index's. Default "toc".
	Prefix string
	Logger *slog.Logger
	// Heartbeat is how often the node renews its membership; MemberTTL how
	// long a member lives without one (how long a dead node's slots wait).
	Heartbeat time.Duration
	MemberTTL time.Duration
	// RepairEvery is how often the whole hot window is promoted again from
	// SQL. Default 30s.
	RepairEvery time.Duration
	// Near: writes due within it are announced to the slot's owner at once
	// (match or exceed the engine's Window). Default 30s.
	Near time.Duration
	// AckDelay: the index entries of attempts that ended delivered (and
	// of tasks cancelled meanwhile) leave Redis together, up to this long
	// after the outcome, so that a few commands per slot remove many
	// (Ended). Meanwhile an entry stays in its PrepareQueue under a
	// lease that has not run out, which no node claims. Default 200ms.
	AckDelay time.Duration
}

// Engine is what a node tells its engine: other nodes' notices, and the
// changes of slot ownership. The engine (package engine) implements it; the
// node implements the engine's Index and the RateLimiter its Limiter, so
// that neither package imports the other.
type Engine interface {
	// Boot names the engine's process: the node's member name.
	Boot() string
	// Notify: a task another node wrote wakes at `at`.
	Notify(id task.ID, at time.Time, app string)
	// NotifyPull: app has pull tasks due (another node's PullDue).
	NotifyPull(app string)
	// SlotFreed: one of app's cluster-wide in-flight slots was released.
	SlotFreed(app string)
	// Rescan: read the node's slots again (the index has tasks the
	// engine has not seen).
	Rescan()
	// Reown: the node's slots changed; forget what it timed and rescan.
	Reown()
}

// Node is one cluster member. It implements engine.Index.
type Node struct {
	cfg Config
	x   *redisindex.Index
	rdb redis.UniversalClient
	log *slog.Logger
	eng Engine
	me  string

	// repair asks promoteLoop for a repair scan at once (capacity 1):
	// Redis lost the cluster's keys, or a write to it failed.
	repair chan struct{}

	syncs gather // Sync's writes

	// acks are the entries of finished tasks waiting for ackLoop
	// (Ended); on while the loop runs. ackFull (capacity 1) asks the
	// loop to write them at once.
	acks struct {
		sync.Mutex
		ops []redisindex.Op
		on  bool
	}
	ackFull chan struct{}

	// takeTurn turns the slot TakePull starts at, so that no slot's tasks
	// wait behind another's.
	takeTurn atomic.Uint32

	mu struct {
		sync.Mutex
		epoch  string               // the value of epochKey this node last saw
		down   bool                 // the last heartbeat failed
		live   []string             // sorted member names
		slots  map[int]bool         // owned Redis slots (of every app)
		shards []int                // owned SQL shards
		apps   []string             // apps in Redis
		prom   map[int]store.Cursor // promotion cursor per owned shard
	}

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a node; Attach an engine, then Start.
func New(cfg Config) (*Node, error) {
	if cfg.Redis == nil || cfg.Index == nil || cfg.SQL == nil {
		return nil, errors.New("cluster: Redis, Index and SQL are required")
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, redisindex.PrefixDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, HeartbeatDefault)
	cfg.MemberTTL = cmp.Or(cfg.MemberTTL, MemberTTLDefault)
	cfg.RepairEvery = cmp.Or(cfg.RepairEvery, RepairEveryDefault)
	cfg.Near = cmp.Or(cfg.Near, NearDefault)
	cfg.AckDelay = cmp.Or(cfg.AckDelay, AckDelayDefault)
	if cfg.MemberTTL < 2*cfg.Heartbeat {
		return nil, fmt.Errorf("cluster: MemberTTL (%s) must be at least twice Heartbeat (%s)", cfg.MemberTTL, cfg.Heartbeat)
	}
	n := &Node{cfg: cfg, x: cfg.Index, rdb: cfg.Redis, log: cfg.Logger, repair: make(chan struct{}, 1), ackFull: make(chan struct{}, 1)}
	n.mu.slots = map[int]bool{}
	n.mu.prom = map[int]store.Cursor{}
	return n, nil
}

// Attach gives the node its engine (which was built with the node as its
// Index). Call before Start.
func (n *Node) Attach(e Engine) {
	n.eng = e
	n.me = e.Boot()
}

func (n *Node) membersKey() string  { return n.cfg.Prefix + ":nodes" }
func (n *Node) epochKey() string    { return n.cfg.Prefix + ":epoch" }
func (n *Node) wakeChannel() string { return n.cfg.Prefix + ":wake" }

// Start joins the cluster and starts the node's loops: heartbeat,
// promotion and repair, and the wake listener. It returns once the node
// has joined and computed its share.
func (n *Node) Start(ctx context.Context) error {
	if n.eng == nil {
		return errors.New("cluster: Attach an engine before Start")
	}
	if err := n.heartbeat(ctx); err != nil {
		return fmt.Errorf("join the cluster: %w", err)
	}
	sub := n.rdb.Subscribe(ctx, n.wakeChannel())
	if _, err := sub.Receive(ctx); err != nil {
		sub.Close()
		return fmt.Errorf("subscribe to %s: %w", n.wakeChannel(), err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.acks.Lock()
	n.acks.on = true
	n.acks.Unlock()
	n.wg.Add(4)
	go func() { defer n.wg.Done(); n.heartbeatLoop(lctx) }()
	go func() { defer n.wg.Done(); n.promoteLoop(lctx) }()
	go func() { defer n.wg.Done(); defer sub.Close(); n.listen(lctx, sub) }()
	go func() { defer n.wg.Done(); n.ackLoop(lctx) }()
	return nil
}

// Stop leaves the cluster (so others take over at once) and stops the
// loops, writing the finished tasks' entries that wait (Ended) first.
// Safe to call more than once and before Start.
func (n *Node) Stop(ctx context.Context) error {
	if n.cancel == nil {
		return nil
	}
	n.cancel()
	n.wg.Wait()
	n.cancel = nil
	n.acks.Lock()
	n.acks.on = false // from now on Ended writes at once
	n.acks.Unlock()
	n.flushAcks(ctx)
	if err := n.rdb.ZRem(ctx, n.membersKey(), n.me).Err(); err != nil {
		return fmt.Errorf("leave the cluster: %w", err)
	}
	return nil
}

// heartbeat renews membership, reads the live members and the apps, and
// recomputes ownership when the members changed.
//
// It also watches for a Redis that lost the cluster's keys (restarted
// without persistence, flushed, failed over to an empty replica): the
// first node to see the epoch key missing sets a new one, and every node
// that sees the epoch change, or Redis answer again after a failed
// heartbeat, asks for a repair scan at once instead of at the next
// periodic one.
func (n *Node) heartbeat(ctx context.Context) error {
	now := time.Now()
	pipe := n.rdb.TxPipeline()
	pipe.ZAdd(ctx, n.membersKey(), redis.Z{Score: float64(now.Add(n.cfg.MemberTTL).UnixMilli()), Member: n.me})
	pipe.ZRemRangeByScore(ctx, n.membersKey(), "-inf", strconv.FormatInt(now.UnixMilli(), 10))
	members := pipe.ZRange(ctx, n.membersKey(), 0, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		n.mu.Lock()
		n.mu.down = true
		n.mu.Unlock()
		return fmt.Errorf("heartbeat: %w", err)
	}
	if err := n.checkEpoch(ctx); err != nil {
		return err
	}
	apps, err := n.x.Apps(ctx)
	if err != nil {
		return err
	}
	live := members.Val()
	slices.Sort(live)
	n.mu.Lock()
	changed := !slices.Equal(live, n.mu.live)
	newApps := !slices.Equal(apps, n.mu.apps)
	n.mu.apps = apps
	if changed {
		n.mu.live = live
		n.mu.slots = map[int]bool{}
		for s := range n.x.Slots() {
			if owner(live, "slot", s) == n.me {
				n.mu.slots[s] = true
			}
		}
		n.mu.shards = n.mu.shards[:0]
		for h := range n.cfg.SQL.Shards() {
			if owner(live, "shard", h) == n.me {
				n.mu.shards = append(n.mu.shards, h)
			}
		}
		n.mu.prom = map[int]store.Cursor{} // promote the new share from the start
	}
	nslots, nshards := len(n.mu.slots), len(n.mu.shards)
	n.mu.Unlock()
	if changed {
		n.log.InfoContext(ctx, "cluster members changed", slog.Int("members", len(live)), slog.Int("slots", nslots), slog.Int("shards", nshards))
	}
	switch {
	case changed:
		n.eng.Reown()
	case newApps:
		n.eng.Rescan()
	}
	return nil
}

// checkEpoch compares the cluster's epoch key with the one this node last
// saw (setting a new one where it is missing) and asks for a repair scan
// when it changed or when Redis is back after a failed heartbeat.
func (n *Node) checkEpoch(ctx context.Context) error {
	if err := n.rdb.SetNX(ctx, n.epochKey(), newEpoch(), 0).Err(); err != nil {
		return fmt.Errorf("heartbeat: epoch: %w", err)
	}
	epoch, err := n.rdb.Get(ctx, n.epochKey()).Result()
	if err != nil {
		return fmt.Errorf("heartbeat: epoch: %w", err)
	}
	n.mu.Lock()
	lost := n.mu.epoch != "" && epoch != n.mu.epoch
	back := n.mu.down
	n.mu.epoch, n.mu.down = epoch, false
	n.mu.Unlock()
	switch {
	case lost:
		n.log.WarnContext(ctx, "Redis lost the cluster's keys; promoting the hot window again at once")
		n.x.ForgetRegistrations() // the apps set is gone too
		n.wantRepair()
	case back:
		n.log.InfoContext(ctx, "Redis answers again; promoting the hot window again at once")
		n.wantRepair()
	}
	return nil
}

// wantRepair asks promoteLoop for a repair scan now.
func (n *Node) wantRepair() {
	select {
	case n.repair <- struct{}{}:
	default:
	}
}

func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// owner picks the member that owns item i of a kind, by rendezvous hashing:
// the member with the highest hash of (member, kind, i). When a member
// leaves, only its items move.
func owner(members []string, kind string, i int) string {
	var best string
	var bestH uint64
	for _, m := range members {
		h := fnv.New64a()
		h.Write([]byte(m))
		h.Write([]byte{0})
		h.Write([]byte(kind))
		h.Write([]byte(strconv.Itoa(i)))
		if v := mix(h.Sum64()); best == "" || v > bestH {
			best, bestH = m, v
		}
	}
	return best
}

// mix spreads FNV's output (splitmix64's finaliser).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (n *Node) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := n.heartbeat(ctx); err != nil && ctx.Err() == nil {
			n.log.WarnContext(ctx, "cluster heartbeat", slog.String("error", err.Error()))
		}
	}
}

// Live implements engine.Index.
func (n *Node) Live(boot string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := slices.BinarySearch(n.mu.live, boot)
	return ok
}

// Share returns the node's current share: owned slots and SQL shards.
func (n *Node) Share() (slots, shards int, members []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.mu.slots), len(n.mu.shards), slices.Clone(n.mu.live)
}

// OwnsShard reports whether the node owns SQL shard shard (a shard as a
// task or schedule id names it). The engine's schedule loop acts only on
// the schedules of the node's shards (engine.Config.OwnsSchedule); before
// the first heartbeat the node owns none.
func (n *Node) OwnsShard(shard int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Contains(n.mu.shards, shard)
}

// maxID sorts after every task id.
var maxID = task.ID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Wakeups implements engine.Index: the members of the node's slots (store
// and prepare queues) after the cursor and due by until, in wake order.
func (n *Node) Wakeups(ctx context.Context, after store.Cursor, until time.Time, limit int) ([]store.Wakeup, error) {
	n.mu.Lock()
	var refs []redisindex.SlotRef
	for _, app := range n.mu.apps {
		for s := range n.mu.slots {
			refs = append(refs, redisindex.SlotRef{App: app, Slot: s})
		}
	}
	n.mu.Unlock()
	from, afterID := after.At, after.ID
	if from.IsZero() {
		from = time.UnixMilli(0)
	}
	if !from.Equal(time.UnixMilli(from.UnixMilli())) {
		// Scores are whole ms: every member of from's ms is before it.
		afterID = maxID
	}
	es, err := n.x.RangeSlots(ctx, refs, from, afterID, until, limit)
	if err != nil {
		return nil, err
	}
	out := make([]store.Wakeup, 0, len(es))
	for _, e := range es {
		w := store.Wakeup{ID: e.ID, At: e.At, State: task.Scheduled, App: e.App}
		if e.Prepared {
			w.State = task.Delivering
		}
		if !after.Less(store.Cursor{At: w.At, ID: w.ID}) {
			continue
		}
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b store.Wakeup) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return slices.Compare(a.ID[:], b.ID[:])
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Sync implements engine.Index: mirror each task's state into its slot and
// announce (in one message) those that wake soon, in one round trip. Calls
// that come while one is under way are gathered into the next (the
// requests of one create gather call at once), so a gather of creates
// costs one or two round trips, not one per request.
func (n *Node) Sync(ctx context.Context, ts ...*task.Task) error {
	if len(ts) == 0 {
		return nil
	}
	ops, announce := n.opsOf(ts)
	return n.syncs.do(ctx, &gathered{ops: ops, announce: announce}, func(ctx context.Context, ops []redisindex.Op, announce string) error {
		return n.write(ctx, ops, announce, n.x.SettleMany)
	})
}

// Ended implements engine.Index: mirror the outcomes of attempts this node
// claimed (each task's member is in its PrepareQueue), with a few variadic
// commands per slot instead of a script per task. The entries of tasks
// delivered or cancelled, which no write brings back, leave in batches, up
// to AckDelay later (see Config.AckDelay); the others at once.
func (n *Node) Ended(ctx context.Context, ts ...*task.Task) error {
	if len(ts) == 0 {
		return nil
	}
	rest := ts
	n.acks.Lock()
	if n.acks.on {
		rest = make([]*task.Task, 0, len(ts))
		now := time.Now()
		for _, t := range ts {
			if t.State != task.Delivered && t.State != task.Cancelled {
				rest = append(rest, t)
				continue
			}
			n.acks.ops = append(n.acks.ops, redisindex.Op{App: t.App, Slot: n.x.Slot(t.Key, t.ID), ID: t.ID, Action: redisindex.Drop, Score: now, Pull: t.Target.Pull != nil})
		}
		if len(n.acks.ops) >= ackBatchMax {
			select {
			case n.ackFull <- struct{}{}:
			default:
			}
		}
	}
	n.acks.Unlock()
	if len(rest) == 0 {
		return nil
	}
	ops, announce := n.opsOf(rest)
	return n.write(ctx, ops, announce, n.x.Ended)
}

// ackWriteTimeout bounds one write of the ack loop.
const ackWriteTimeout = 5 * time.Second

// ackBatchMax is how many deferred entries make the ack loop write at once.
const ackBatchMax = 4096

// ackLoop writes the deferred entries of finished tasks (Ended) every
// AckDelay, or at once when ackBatchMax are waiting.
func (n *Node) ackLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.AckDelay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.ackFull:
		}
		// A write begun is not cut short by Stop (which writes what is
		// left after the loop).
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackWriteTimeout)
		n.flushAcks(wctx)
		cancel()
	}
}

// flushAcks writes the deferred entries of finished tasks: they leave their
// PrepareQueues and attempts hashes. One that fails to leave stays until its
// lease runs out: the slot's owner then claims it, finds the task finished
// and drops it.
func (n *Node) flushAcks(ctx context.Context) {
	n.acks.Lock()
	ops := n.acks.ops
	n.acks.ops = nil
	n.acks.Unlock()
	if len(ops) == 0 {
		return
	}
	if err := n.x.Ended(ctx, ops); err != nil && ctx.Err() == nil {
		n.log.WarnContext(ctx, "remove finished tasks from the index; their leases' end will", slog.Int("tasks", len(ops)), slog.String("error", err.Error()))
	}
}

// opsOf turns each task's state into where its member goes, and the
// announcement of those that wake soon.
func (n *Node) opsOf(ts []*task.Task) ([]redisindex.Op, string) {
	now := time.Now()
	ops := make([]redisindex.Op, 0, len(ts))
	var announce strings.Builder
	for _, t := range ts {
		op := redisindex.Op{App: t.App, Slot: n.x.Slot(t.Key, t.ID), ID: t.ID, Score: now, Pull: t.Target.Pull != nil}
		switch {
		case t.State == task.Scheduled && !t.WakeAt.IsZero() && !t.WakeAt.After(now.Add(n.x.HotWindow())):
			op.Action, op.Score = redisindex.Retry, t.WakeAt
		case t.State == task.Scheduled:
			op.Action = redisindex.Drop // SQL keeps it; promotion brings it back
		case t.State == task.Delivering && t.LeaseExpiresAt != nil:
			op.Action, op.Score = redisindex.Lease, *t.LeaseExpiresAt
		case t.State == task.Dead:
			op.Action = redisindex.Dead
		default:
			op.Action = redisindex.Drop
		}
		ops = append(ops, op)
		if (op.Action == redisindex.Retry || op.Action == redisindex.Lease) && op.Score.Before(now.Add(n.cfg.Near)) {
			announce.WriteString(t.ID.String() + " " + strconv.FormatInt(op.Score.UnixMilli(), 10) + " " + strconv.Itoa(op.Slot) + " " + t.App + "\n")
		}
		if t.State == task.Scheduled && t.Target.Pull != nil && !t.NextAttemptAt.IsZero() && !t.NextAttemptAt.After(now.Add(n.x.HotWindow())) {
			// A pull task waiting for a lease, due within the hot window:
			// lease calls take it from its slot's PullQueue (TakePull)
			// once it is due, whether or not its slot's owner fired it
			// yet. After the op above, which takes it out of there.
			ops = append(ops, redisindex.Op{App: t.App, Slot: op.Slot, ID: t.ID, Action: redisindex.QueuePull, Score: t.NextAttemptAt, Pull: true})
		}
	}
	return ops, announce.String()
}

// write has write put ops in Redis and publishes announce in the same round
// trip; when it fails, the repair scan restores what it left out.
func (n *Node) write(ctx context.Context, ops []redisindex.Op, announce string, write func(context.Context, []redisindex.Op, ...redisindex.Note) error) error {
	var notes []redisindex.Note
	if announce != "" {
		notes = append(notes, redisindex.Note{Channel: n.wakeChannel(), Message: announce})
	}
	if err := write(ctx, ops, notes...); err != nil {
		n.wantRepair()
		return err
	}
	return nil
}

// listen hands announcements for the node's slots to its engine.
func (n *Node) listen(ctx context.Context, sub *redis.PubSub) {
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			if app, ok := strings.CutPrefix(m.Payload, "pull "); ok {
				n.eng.NotifyPull(app)
				continue
			}
			if app, ok := strings.CutPrefix(m.Payload, "slot "); ok {
				n.eng.SlotFreed(app)
				continue
			}
			for line := range strings.Lines(m.Payload) {
				f := strings.Fields(line)
				if len(f) != 4 {
					continue
				}
				id, err := task.ParseID(f[0])
				at, err2 := strconv.ParseInt(f[1], 10, 64)
				slot, err3 := strconv.Atoi(f[2])
				if err != nil || err2 != nil || err3 != nil {
					continue
				}
				n.mu.Lock()
				mine := n.mu.slots[slot]
				n.mu.Unlock()
				if mine {
					n.eng.Notify(id, time.UnixMilli(at), f[3])
				}
			}
		}
	}
}

// PullDue implements engine.Index: one message to all nodes.
func (n *Node) PullDue(ctx context.Context, app string) {
	if err := n.rdb.Publish(ctx, n.wakeChannel(), "pull "+app).Err(); err != nil {
		n.log.WarnContext(ctx, "announce due pull tasks", slog.String("app", app), slog.String("error", err.Error()))
	}
}

// TakePull takes up to max of app's pull tasks due at now from their slots'
// PullQueues, in one round trip, each held for the caller until
// holdUntil (redisindex.TakePull): the caller leases them in SQL and
// mirrors what it wrote (Sync), which moves each member where its row
// says; Untake gives back the others. Every node takes from every slot: a
// lease is not the slot owner's.
func (n *Node) TakePull(ctx context.Context, app string, max int, now, holdUntil time.Time) ([]task.ID, error) {
	ts, err := n.x.TakePull(ctx, app, max, now, holdUntil, int(n.takeTurn.Add(1)))
	if err != nil {
		return nil, err
	}
	ids := make([]task.ID, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	return ids, nil
}

// Untake ends the holds of pull tasks of app that TakePull took and the
// caller did not lease: back (as read: due and waiting) are claimable again
// at now; stale (as read: not waiting for a lease, their writes mirrored
// them elsewhere already) and gone (no row: looked for in every slot,
// rare) leave the PullQueue.
func (n *Node) Untake(ctx context.Context, app string, back, stale []*task.Task, gone []task.ID, now time.Time) error {
	tb := make([]redisindex.Taken, len(back))
	for i, t := range back {
		tb[i] = redisindex.Taken{ID: t.ID, Slot: n.x.Slot(t.Key, t.ID)}
	}
	if err := n.x.PutPull(ctx, app, tb, now); err != nil {
		return err
	}
	var tg []redisindex.Taken
	for _, t := range stale {
		tg = append(tg, redisindex.Taken{ID: t.ID, Slot: n.x.Slot(t.Key, t.ID)})
	}
	for _, id := range gone {
		for s := range n.x.Slots() {
			tg = append(tg, redisindex.Taken{ID: id, Slot: s})
		}
	}
	return n.x.DropPull(ctx, app, tg)
}

// Watches implements engine.Index: the node times the tasks of its slots.
func (n *Node) Watches(t *task.Task) bool {
	slot := n.x.Slot(t.Key, t.ID)
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.slots[slot]
}

// Claim implements engine.Index: one claim_many script per slot, in one
// pipeline, which numbers the attempts.
func (n *Node) Claim(ctx context.Context, ts []*task.Task, until []time.Time, now time.Time) ([]int, error) {
	cs := make([]redisindex.Claim, len(ts))
	for i, t := range ts {
		cs[i] = redisindex.Claim{App: t.App, Slot: n.x.Slot(t.Key, t.ID), ID: t.ID, LeaseUntil: until[i],
			Attempt: t.State == task.Scheduled, Attempts: t.Attempts}
	}
	return n.x.ClaimMany(ctx, cs, now)
}

// promotePage puts one page of a shard's wakeups in their slots (the
// scheduled in one round trip, AddMany; the leased, rare, in another) and
// announces, in one message, those that wake soon.
func (n *Node) promotePage(ctx context.Context, ws []store.Wakeup) error {
	var adds []redisindex.Added
	var leases, pulls []redisindex.Op
	var announce strings.Builder
	near := time.Now().Add(n.cfg.Near)
	for _, w := range ws {
		slot := n.x.Slot(w.Key, w.ID)
		switch w.State {
		case task.Scheduled:
			adds = append(adds, redisindex.Added{App: w.App, Slot: slot, ID: w.ID, At: w.At})
			if w.Kind == "pull" {
				// Its lease calls take it from the PullQueue once due.
				// Unless it is there already: At is the due time of a
				// task not fired yet, but the deadline of one fired
				// (a due pull task waits with its deadline as WakeAt),
				// and a task there already has its due time.
				pulls = append(pulls, redisindex.Op{App: w.App, Slot: slot, ID: w.ID, Action: redisindex.QueuePullNX, Score: w.At, Pull: true})
			}
		case task.Delivering:
			leases = append(leases, redisindex.Op{App: w.App, Slot: slot, ID: w.ID, Action: redisindex.Lease, Score: w.At, Pull: w.Kind == "pull"})
		}
		if w.At.Before(near) {
			announce.WriteString(w.ID.String() + " " + strconv.FormatInt(w.At.UnixMilli(), 10) + " " + strconv.Itoa(slot) + " " + w.App + "\n")
		}
	}
	if _, err := n.x.AddMany(ctx, adds); err != nil {
		return err
	}
	if err := n.x.SettleMany(ctx, append(leases, pulls...)); err != nil {
		return err
	}
	if announce.Len() > 0 {
		_ = n.rdb.Publish(ctx, n.wakeChannel(), announce.String()).Err()
	}
	return nil
}

// promoteLoop moves tasks entering the hot window from the owned SQL shards
// into Redis, and every RepairEvery promotes the whole window again.
func (n *Node) promoteLoop(ctx context.Context) {
	every := min(n.x.HotWindow()/4, 5*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	lastRepair := time.Now()
	wanted := false // a repair was asked for (wantRepair)
	for {
		repair := wanted || time.Since(lastRepair) >= n.cfg.RepairEvery
		if repair {
			lastRepair = time.Now()
			n.mu.Lock()
			n.mu.prom = map[int]store.Cursor{}
			n.mu.Unlock()
		}
		err := n.promote(ctx)
		if err != nil && ctx.Err() == nil {
			n.log.WarnContext(ctx, "promote tasks to Redis", slog.String("error", err.Error()))
		}
		if wanted && err == nil {
			// The index may have lost entries the engine's wheel had:
			// read the node's slots again.
			n.eng.Rescan()
		}
		wanted = wanted && err != nil // a failed repair is tried again at the next tick
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.repair:
			wanted = true
		}
	}
}

// RepairNow promotes the whole hot window of the owned shards again (what
// the periodic repair scan does).
func (n *Node) RepairNow(ctx context.Context) error {
	n.mu.Lock()
	n.mu.prom = map[int]store.Cursor{}
	n.mu.Unlock()
	return n.promote(ctx)
}

func (n *Node) promote(ctx context.Context) error {
	n.mu.Lock()
	shards := slices.Clone(n.mu.shards)
	n.mu.Unlock()
	until := time.Now().Add(n.x.HotWindow())
	for _, h := range shards {
		n.mu.Lock()
		cur := n.mu.prom[h]
		n.mu.Unlock()
		for {
			ws, err := n.cfg.SQL.ShardWakeups(ctx, h, cur, until, 1000)
			if err != nil {
				return fmt.Errorf("scan shard %d: %w", h, err)
			}
			if err := n.promotePage(ctx, ws); err != nil {
				return err
			}
			if len(ws) > 0 {
				cur = store.Cursor{At: ws[len(ws)-1].At, ID: ws[len(ws)-1].ID}
			}
			if len(ws) < 1000 {
				break
			}
		}
		n.mu.Lock()
		n.mu.prom[h] = cur
		n.mu.Unlock()
	}
	return nil
}
