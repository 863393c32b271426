// Package redisindex is the hot tier of toc's cluster mode: for each app,
// --slots sorted sets per queue (the Alibaba timeout center's StoreQueue,
// PrepareQueue and DeadQueue) holding the ids of tasks due within the hot
// window, shared by every node.
//
// # Layout
//
// A task's slot is CRC32 of its key (of its id when it has none) modulo the
// number of slots, a power of two. The three queues of a slot share one hash
// tag, {<prefix>:<app>:<slot>}, so the Lua scripts that move members between
// them run on Redis Cluster (all keys of a script in one hash slot); every
// key a script touches is passed in KEYS[]. Scores are unix milliseconds:
// the wake time in the StoreQueue, the lease expiry in the PrepareQueue.
// The attempts hash (the number of each member's last attempt claimed) is
// the slot's on Redis Cluster, and one for every slot, <prefix>:attempts,
// on a standalone Redis, where one script call claims in many slots.
// Nodes before that one numbered from the slot's hash on a standalone Redis
// too: during a rolling upgrade, the next attempt of a task whose lease
// ran out on an older node may get the same number; the first of their
// outcomes written lands, and the other is only added to the history (an
// outcome is written over the record its fire job read, and lands only
// with more attempts than stored). The slots' hashes the older nodes left
// keep the entries of tasks that end after the upgrade.
//
// Each slot also has a PullQueue (scripts/lease_many.lua): the pull tasks
// waiting for a lease, scored by their due time, from which lease calls on
// any node take those due.
//
// Members are task ids. Redis holds no task data: the SQL row is
// authoritative, and a member whose row says otherwise is dropped by the
// engine. Losing Redis loses nothing; the repair scan rebuilds it from SQL.
package redisindex

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toc-dev/toc/task"
)

// Defaults of Options.
const (
	PrefixDefault    = "toc"
	SlotsDefault     = 64
	HotWindowDefault = 10 * time.Minute
)

// Options configure an Index.
type Options struct {
	// Client is a standalone or cluster client (redis.UniversalClient).
	// Required.
	Client redis.UniversalClient
	// Prefix starts every key (tests use their own). Default "toc".
	Prefix string
	// Slots per app, a power of two. Default 64.
	Slots int
	// HotWindow: tasks due within it are in Redis. Default 10m.
	HotWindow time.Duration
}

// Index is the Redis hot tier. Safe for concurrent use.
type Index struct {
	rdb    redis.UniversalClient
	prefix string
	slots  int
	hot    time.Duration
	// cluster: the client is Redis Cluster's, where a script's keys share
	// a hash slot (one call per slot, each slot its own attempts hash).
	cluster bool

	mu   sync.Mutex
	apps map[string]time.Time // when each app was last registered
}

// registerEvery is how often an app in use is added to the apps set again,
// so a Redis that lost it (restart, flush) learns it back.
const registerEvery = 10 * time.Second

// New returns an Index.
func New(o Options) (*Index, error) {
	if o.Client == nil {
		return nil, errors.New("redisindex: Client is required")
	}
	o.Slots = cmp.Or(o.Slots, SlotsDefault)
	if o.Slots < 1 || o.Slots > 1<<14 || bits.OnesCount(uint(o.Slots)) != 1 {
		return nil, fmt.Errorf("redisindex: Slots must be a power of two between 1 and 16384, got %d", o.Slots)
	}
	_, cluster := o.Client.(*redis.ClusterClient)
	return &Index{
		rdb:     o.Client,
		prefix:  cmp.Or(o.Prefix, PrefixDefault),
		slots:   o.Slots,
		hot:     cmp.Or(o.HotWindow, HotWindowDefault),
		cluster: cluster,
		apps:    map[string]time.Time{},
	}, nil
}

// Slots returns the number of slots per app.
func (x *Index) Slots() int { return x.slots }

// HotWindow returns how far ahead tasks are kept in Redis.
func (x *Index) HotWindow() time.Duration { return x.hot }

// Slot returns the slot of a task: CRC32 of its key, or of its id's text
// when it has no key.
func (x *Index) Slot(key string, id task.ID) int {
	var h uint32
	if key != "" {
		h = crc32.ChecksumIEEE([]byte(key))
	} else {
		h = crc32.ChecksumIEEE([]byte(id.String()))
	}
	return int(h & uint32(x.slots-1))
}

// Queues names the three sorted sets of one slot, its attempts hash (the
// number of each member's last attempt claimed: claim_many.lua), and its
// PullQueue: the pull tasks due and waiting for a lease, scored by their
// due time, or by the end of a lease call's hold (lease_many.lua).
type Queues struct{ Store, Prepare, Dead, Attempts, Pull string }

// Queues returns the keys of app's slot. They share the hash tag
// {prefix:app:slot}, but for the attempts hash on a standalone Redis,
// where one hash, <prefix>:attempts, serves every slot of every app (its
// members are task ids): a claim over many slots numbers its attempts in
// one or two commands, not one or two per slot (claim_many.lua).
func (x *Index) Queues(app string, slot int) Queues {
	tag := "{" + x.prefix + ":" + app + ":" + strconv.Itoa(slot) + "}"
	attempts := x.prefix + ":attempts"
	if x.cluster {
		attempts = x.prefix + ":" + tag + ":attempts"
	}
	return Queues{Store: x.prefix + ":" + tag + ":store", Prepare: x.prefix + ":" + tag + ":prepare", Dead: x.prefix + ":" + tag + ":dead", Attempts: attempts, Pull: x.prefix + ":" + tag + ":pull"}
}

func (q Queues) keys() []string { return []string{q.Store, q.Prepare, q.Dead, q.Attempts, q.Pull} }

// appsKey is the set of apps that have had tasks in Redis (so nodes know
// which slot keys to scan).
func (x *Index) appsKey() string { return x.prefix + ":apps" }

var (
	//go:embed scripts/add_many.lua
	addManyLua    string
	addManyScript = redis.NewScript(addManyLua)
	//go:embed scripts/claim_many.lua
	claimManyLua    string
	claimManyScript = redis.NewScript(claimManyLua)
	//go:embed scripts/settle_many.lua
	settleManyLua    string
	settleManyScript = redis.NewScript(settleManyLua)
	//go:embed scripts/lease_many.lua
	leaseManyLua    string
	leaseManyScript = redis.NewScript(leaseManyLua)
	//go:embed scripts/range_after.lua
	rangeAfterLua    string
	rangeAfterScript = redis.NewScript(rangeAfterLua)
)

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// register remembers app in the apps set (once per process and app).
func (x *Index) register(ctx context.Context, app string) error {
	x.mu.Lock()
	last, known := x.apps[app]
	x.mu.Unlock()
	if known && time.Since(last) < registerEvery {
		return nil
	}
	if err := x.rdb.SAdd(ctx, x.appsKey(), app).Err(); err != nil {
		return fmt.Errorf("redisindex: register app %s: %w", app, err)
	}
	x.mu.Lock()
	x.apps[app] = time.Now()
	x.mu.Unlock()
	return nil
}

// ForgetRegistrations makes the next write of each app register it again:
// for when Redis lost its keys, the apps set with them.
func (x *Index) ForgetRegistrations() {
	x.mu.Lock()
	defer x.mu.Unlock()
	clear(x.apps)
}

// Apps returns every app that has had tasks in Redis.
func (x *Index) Apps(ctx context.Context) ([]string, error) {
	apps, err := x.rdb.SMembers(ctx, x.appsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("redisindex: list apps: %w", err)
	}
	slices.Sort(apps)
	return apps, nil
}

// Add puts a scheduled task in its slot's StoreQueue at `at`, unless it is
// in the PrepareQueue (being delivered). Reports whether it was added.
func (x *Index) Add(ctx context.Context, app string, slot int, id task.ID, at time.Time) (bool, error) {
	added, err := x.AddMany(ctx, []Added{{App: app, Slot: slot, ID: id, At: at}})
	if err != nil {
		return false, err
	}
	return added[0], nil
}

// Added is one task of AddMany.
type Added struct {
	App  string
	Slot int
	ID   task.ID
	At   time.Time // its wake time
}

// AddMany runs Add for each task of as, with a few commands per slot
// (scripts/add_many.lua), in one round trip: on a standalone Redis one
// script call for every slot, on Redis Cluster one per slot, pipelined (one
// pipeline per master). It reports which were added.
func (x *Index) AddMany(ctx context.Context, as []Added) ([]bool, error) {
	if len(as) == 0 {
		return nil, nil
	}
	for _, a := range as {
		if err := x.register(ctx, a.App); err != nil {
			return nil, err
		}
	}
	groups := groupBySlot(len(as), func(i int) (SlotRef, task.ID) { return SlotRef{as[i].App, as[i].Slot}, as[i].ID }, claimGroupMax)
	calls := x.calls(groups)
	cmds, err := x.pipeline(ctx, addManyScript, len(calls), func(pipe redis.Pipeliner, c int) redis.Cmder {
		keys := make([]string, 0, 3*len(calls[c]))
		var args []any
		for _, idx := range calls[c] {
			q := x.Queues(as[idx[0]].App, as[idx[0]].Slot)
			keys = append(keys, q.Store, q.Prepare, q.Dead)
			args = append(args, len(idx))
			for _, i := range idx {
				args = append(args, as[i].ID.String(), ms(as[i].At))
			}
		}
		return addManyScript.EvalSha(ctx, pipe, keys, args...)
	})
	if err != nil {
		return nil, fmt.Errorf("redisindex: add %d members: %w", len(as), err)
	}
	added := make([]bool, len(as))
	for c, cmd := range cmds {
		got, err := cmd.(*redis.Cmd).Int64Slice()
		k := 0
		for _, idx := range calls[c] {
			if err != nil || len(got) < k+len(idx) {
				a0 := as[idx[0]]
				return nil, fmt.Errorf("redisindex: add in %s: %v (%d answers for %d members)", x.Queues(a0.App, a0.Slot).Store, err, len(got), k+len(idx))
			}
			for _, i := range idx {
				added[i] = got[k] == 1
				k++
			}
		}
	}
	return added, nil
}

// Action is what Settle does with a member.
type Action string

// Settle actions.
const (
	Ack   Action = "ack"   // delivered: remove
	Retry Action = "retry" // back to the StoreQueue at score
	Lease Action = "lease" // in the PrepareQueue until score
	Dead  Action = "dead"  // to the DeadQueue
	Drop  Action = "drop"  // gone from every queue (SQL keeps the task)
	// QueuePull puts a pull task in the PullQueue at score (its due
	// time), where lease calls take it once due (TakePull). Every other
	// action of a pull task (Op.Pull) takes the member out of the
	// PullQueue, so a QueuePull op of a member comes after its other op
	// (SettleMany keeps the order).
	QueuePull Action = "queue-pull"
	// QueuePullNX is QueuePull unless the member is in the PullQueue
	// already (with its due time, or held by a lease call): a promotion's.
	QueuePullNX Action = "queue-pull-nx"
)

// Settle records where a member goes: see scripts/settle_many.lua.
func (x *Index) Settle(ctx context.Context, app string, slot int, id task.ID, a Action, score time.Time) error {
	return x.SettleMany(ctx, []Op{{App: app, Slot: slot, ID: id, Action: a, Score: score}})
}

// Op is one Settle of SettleMany.
type Op struct {
	App    string
	Slot   int
	ID     task.ID
	Action Action
	Score  time.Time
	// Pull says the member is a pull task's: an action other than QueuePull(NX)
	// takes it out of its PullQueue too (a push task's never is there).
	Pull bool
}

// arg is op's action as settle_many.lua reads it.
func (op Op) arg() string {
	if op.Pull && op.Action != QueuePull && op.Action != QueuePullNX {
		return string(op.Action) + "+"
	}
	return string(op.Action)
}

// Note is a message published after a write, in its round trip.
type Note struct{ Channel, Message string }

// SettleMany runs Settle for each op, in order, with a few commands per
// slot (scripts/settle_many.lua), in one round trip: on a standalone Redis
// one script call for every slot, on Redis Cluster one per slot, pipelined
// (one pipeline per master); then it publishes notes in it. A member
// written twice goes to a later group, after the first.
func (x *Index) SettleMany(ctx context.Context, ops []Op, notes ...Note) error {
	if len(ops) == 0 {
		return nil
	}
	for _, op := range ops {
		if op.Action == Retry {
			if err := x.register(ctx, op.App); err != nil {
				return err
			}
		}
	}
	groups := groupBySlot(len(ops), func(i int) (SlotRef, task.ID) { return SlotRef{ops[i].App, ops[i].Slot}, ops[i].ID }, claimGroupMax)
	calls := x.calls(groups)
	_, err := x.pipeline(ctx, settleManyScript, len(calls)+len(notes), func(pipe redis.Pipeliner, c int) redis.Cmder {
		if c >= len(calls) {
			return pipe.Publish(ctx, notes[c-len(calls)].Channel, notes[c-len(calls)].Message)
		}
		keys := make([]string, 0, 5*len(calls[c]))
		var args []any
		for _, idx := range calls[c] {
			keys = append(keys, x.Queues(ops[idx[0]].App, ops[idx[0]].Slot).keys()...)
			args = append(args, len(idx))
			for _, i := range idx {
				args = append(args, ops[i].ID.String(), ops[i].arg(), ms(ops[i].Score))
			}
		}
		return settleManyScript.EvalSha(ctx, pipe, keys, args...)
	})
	if err != nil {
		return fmt.Errorf("redisindex: settle %d members: %w", len(ops), err)
	}
	return nil
}

// Claim is one claim of ClaimMany.
type Claim struct {
	App        string
	Slot       int
	ID         task.ID
	LeaseUntil time.Time
	// Attempt says the claim is for a push attempt, which ClaimMany
	// numbers; Attempts is then the task's stored attempt count.
	Attempt  bool
	Attempts int
}

// claimGroupMax bounds the members of one claim_many call (Lua's unpack
// takes a few thousand arguments at most).
const claimGroupMax = 1000

// ClaimMany claims the members of cs that are due at now for the caller
// (scripts/claim_many.lua), in one round trip: on a standalone Redis one
// script call claims in every slot of cs (a few commands per slot, not per
// member); on Redis Cluster, where a script's keys share a hash slot, one
// call per slot, all in one pipeline per master. It reports which members
// the caller now holds, each in its PrepareQueue until its LeaseUntil: 0
// where it does not; for an attempt, the attempt's number (one more than
// the last claimed of the member, or than its Attempts when that is more);
// 1 for another claim.
func (x *Index) ClaimMany(ctx context.Context, cs []Claim, now time.Time) ([]int, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	groups := groupBySlot(len(cs), func(i int) (SlotRef, task.ID) { return SlotRef{cs[i].App, cs[i].Slot}, cs[i].ID }, claimGroupMax)
	calls := x.calls(groups)
	cmds, err := x.pipeline(ctx, claimManyScript, len(calls), func(pipe redis.Pipeliner, c int) redis.Cmder {
		keys := make([]string, 0, 2*len(calls[c])+1)
		args := []any{ms(now)}
		var attempts string // the call's: one for all on a standalone Redis
		for _, idx := range calls[c] {
			q := x.Queues(cs[idx[0]].App, cs[idx[0]].Slot)
			keys = append(keys, q.Store, q.Prepare)
			attempts = q.Attempts
			args = append(args, len(idx))
			for _, i := range idx {
				n := -1
				if cs[i].Attempt {
					n = cs[i].Attempts
				}
				args = append(args, cs[i].ID.String(), ms(cs[i].LeaseUntil), n)
			}
		}
		keys = append(keys, attempts)
		return claimManyScript.EvalSha(ctx, pipe, keys, args...)
	})
	if err != nil {
		return nil, fmt.Errorf("redisindex: claim %d members: %w", len(cs), err)
	}
	held := make([]int, len(cs))
	for c, cmd := range cmds {
		got, err := cmd.(*redis.Cmd).Int64Slice()
		k := 0
		for _, idx := range calls[c] {
			if err != nil || len(got) < k+len(idx) {
				c0 := cs[idx[0]]
				return nil, fmt.Errorf("redisindex: claim in %s: %v (%d answers for %d members)", x.Queues(c0.App, c0.Slot).Prepare, err, len(got), k+len(idx))
			}
			for _, i := range idx {
				held[i] = int(got[k])
				k++
			}
		}
	}
	return held, nil
}

// Taken is a pull task TakePull took: its id and slot.
type Taken struct {
	ID   task.ID
	Slot int
}

// TakePull takes up to max of app's pull tasks due at now from its slots'
// PullQueues (scripts/lease_many.lua), holding each until holdUntil: no
// other call takes it before then, unless its member is written back
// meanwhile (SettleMany, PutPull). The slots are visited from first on.
// On a standalone Redis it is one script call; on Redis Cluster one per
// slot, in one pipeline per master, and what is taken beyond max is put
// back at once (claimable at now).
func (x *Index) TakePull(ctx context.Context, app string, max int, now, holdUntil time.Time, first int) ([]Taken, error) {
	if max <= 0 {
		return nil, nil
	}
	first &= x.slots - 1
	groups := [][]int{}
	if _, cluster := x.rdb.(*redis.ClusterClient); cluster {
		for s := range x.slots {
			groups = append(groups, []int{(first + s) & (x.slots - 1)})
		}
	} else {
		all := make([]int, x.slots)
		for s := range all {
			all[s] = s
		}
		groups = append(groups, all)
	}
	cmds, err := x.pipeline(ctx, leaseManyScript, len(groups), func(pipe redis.Pipeliner, c int) redis.Cmder {
		keys := make([]string, len(groups[c]))
		for k, s := range groups[c] {
			keys[k] = x.Queues(app, s).Pull
		}
		start := 0
		if len(groups[c]) > 1 {
			start = first
		}
		return leaseManyScript.EvalSha(ctx, pipe, keys, ms(now), ms(holdUntil), max, start)
	})
	if err != nil {
		return nil, fmt.Errorf("redisindex: take pull tasks due of %s: %w", app, err)
	}
	var out, surplus []Taken
	for c, cmd := range cmds {
		got, err := cmd.(*redis.Cmd).Slice()
		if err != nil {
			return nil, fmt.Errorf("redisindex: take pull tasks due of %s: %w", app, err)
		}
		for k := 0; k+1 < len(got); k += 2 {
			i, _ := got[k].(int64)
			m, _ := got[k+1].(string)
			id, err := task.ParseID(m)
			if err != nil || int(i) >= len(groups[c]) {
				continue
			}
			t := Taken{ID: id, Slot: groups[c][i]}
			if len(out) < max {
				out = append(out, t)
			} else {
				surplus = append(surplus, t)
			}
		}
	}
	if len(surplus) > 0 {
		if err := x.PutPull(ctx, app, surplus, now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// PutPull gives back pull tasks TakePull took, claimable again at `at`
// (their due time is gone with the hold: at is the caller's now). Only
// members still in their PullQueue are scored again.
func (x *Index) PutPull(ctx context.Context, app string, ts []Taken, at time.Time) error {
	if len(ts) == 0 {
		return nil
	}
	pipe := x.rdb.Pipeline()
	by := map[int][]redis.Z{}
	for _, t := range ts {
		by[t.Slot] = append(by[t.Slot], redis.Z{Score: float64(at.UnixMilli()), Member: t.ID.String()})
	}
	for s, zs := range by {
		pipe.ZAddXX(ctx, x.Queues(app, s).Pull, zs...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisindex: put back %d pull tasks of %s: %w", len(ts), app, err)
	}
	return nil
}

// DropPull takes pull tasks TakePull took out of their PullQueues (their
// rows are gone).
func (x *Index) DropPull(ctx context.Context, app string, ts []Taken) error {
	if len(ts) == 0 {
		return nil
	}
	pipe := x.rdb.Pipeline()
	by := map[int][]any{}
	for _, t := range ts {
		by[t.Slot] = append(by[t.Slot], t.ID.String())
	}
	for s, ms := range by {
		pipe.ZRem(ctx, x.Queues(app, s).Pull, ms...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisindex: drop %d pull tasks of %s: %w", len(ts), app, err)
	}
	return nil
}

// calls packs groups (of one slot each) into script calls, in order: on a
// standalone Redis as many groups per call as claimGroupMax members allow;
// on Redis Cluster, where a script's keys must share a hash slot, one.
func (x *Index) calls(groups [][]int) [][][]int {
	var calls [][][]int
	if x.cluster {
		for _, g := range groups {
			calls = append(calls, [][]int{g})
		}
		return calls
	}
	n := 0
	for _, g := range groups {
		if len(calls) == 0 || n+len(g) > claimGroupMax {
			calls, n = append(calls, nil), 0
		}
		calls[len(calls)-1] = append(calls[len(calls)-1], g)
		n += len(g)
	}
	return calls
}

// groupBySlot returns the indexes 0..n-1 grouped by their slot (ref(i)'s
// SlotRef), in first-seen order, no group longer than max. A member (ref(i)'s
// ID) met again in its slot starts a new group, after the one that has it:
// a script sees each member once, and a later write of it comes later.
func groupBySlot(n int, ref func(int) (SlotRef, task.ID), max int) [][]int {
	at := make(map[SlotRef]int)
	in := make(map[task.ID]int, n) // the last group of each member
	var groups [][]int
	for i := range n {
		r, id := ref(i)
		g, ok := at[r]
		if last, seen := in[id]; !ok || len(groups[g]) >= max || seen && last == g {
			g = len(groups)
			at[r] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
		in[id] = g
	}
	return groups
}

// Ended records where members the caller claimed go after their attempt
// (ops' actions: Ack, Retry, Dead, Lease; Drop as Ack). Each member is in
// its slot's PrepareQueue, where ClaimMany put it, so this takes a few
// plain variadic commands per slot instead of a script per member: remove
// them from the PrepareQueue, and add the retried to the StoreQueue, the
// dead to the DeadQueue and the re-leased to the PrepareQueue again, and
// drop the finished from the attempts hash (claim_many.lua). A
// member whose lease ran out and that another node claimed meanwhile is
// removed all the same; that node's own outcome puts it where it belongs.
// The notes are published in the same round trip, after the writes.
func (x *Index) Ended(ctx context.Context, ops []Op, notes ...Note) error {
	if len(ops) == 0 {
		return nil
	}
	for _, op := range ops {
		if op.Action == Retry {
			if err := x.register(ctx, op.App); err != nil {
				return err
			}
		}
	}
	groups := groupBySlot(len(ops), func(i int) (SlotRef, task.ID) { return SlotRef{ops[i].App, ops[i].Slot}, ops[i].ID }, claimGroupMax)
	pipe := x.rdb.Pipeline()
	// The members gone, by attempts hash: on a standalone Redis one HDEL
	// for all the slots, after the groups.
	var goneBy map[string][]string
	var hashes []string
	for _, idx := range groups {
		q := x.Queues(ops[idx[0]].App, ops[idx[0]].Slot)
		var done []any
		var gone []string
		var retry, dead, lease, queued, queuedNX []redis.Z
		var unqueued []any
		for _, i := range idx {
			op := ops[i]
			m := op.ID.String()
			if op.Pull && op.Action != QueuePull && op.Action != QueuePullNX {
				unqueued = append(unqueued, m)
			}
			switch op.Action {
			case QueuePull:
				queued = append(queued, redis.Z{Score: float64(op.Score.UnixMilli()), Member: m})
				continue // its other op (a later group) moved it already
			case QueuePullNX:
				queuedNX = append(queuedNX, redis.Z{Score: float64(op.Score.UnixMilli()), Member: m})
				continue
			case Retry:
				retry = append(retry, redis.Z{Score: float64(op.Score.UnixMilli()), Member: m})
			case Dead:
				dead = append(dead, redis.Z{Score: float64(op.Score.UnixMilli()), Member: m})
				gone = append(gone, m)
			case Ack, Drop:
				gone = append(gone, m)
			case Lease:
				lease = append(lease, redis.Z{Score: float64(op.Score.UnixMilli()), Member: m})
				continue // stays in the PrepareQueue, re-scored below
			}
			done = append(done, m)
		}
		if len(done) > 0 {
			pipe.ZRem(ctx, q.Prepare, done...)
		}
		if len(retry) > 0 {
			pipe.ZAdd(ctx, q.Store, retry...)
		}
		if len(dead) > 0 {
			pipe.ZAdd(ctx, q.Dead, dead...)
		}
		if len(lease) > 0 {
			pipe.ZAdd(ctx, q.Prepare, lease...)
		}
		if len(gone) > 0 {
			if goneBy == nil {
				goneBy = map[string][]string{}
			}
			if _, ok := goneBy[q.Attempts]; !ok {
				hashes = append(hashes, q.Attempts)
			}
			goneBy[q.Attempts] = append(goneBy[q.Attempts], gone...)
		}
		if len(unqueued) > 0 {
			pipe.ZRem(ctx, q.Pull, unqueued...)
		}
		if len(queued) > 0 {
			pipe.ZAdd(ctx, q.Pull, queued...)
		}
		if len(queuedNX) > 0 {
			pipe.ZAddNX(ctx, q.Pull, queuedNX...)
		}
	}
	for _, h := range hashes {
		pipe.HDel(ctx, h, goneBy[h]...)
	}
	for _, n := range notes {
		pipe.Publish(ctx, n.Channel, n.Message)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisindex: settle %d claimed members: %w", len(ops), err)
	}
	return nil
}

// pipeline sends n calls of script, made by add, in one pipeline, loading
// the script first where a server does not have it yet. It returns the
// first failing call's error.
func (x *Index) pipeline(ctx context.Context, script *redis.Script, n int, add func(redis.Pipeliner, int) redis.Cmder) ([]redis.Cmder, error) {
	run := func() ([]redis.Cmder, error) {
		pipe := x.rdb.Pipeline()
		cmds := make([]redis.Cmder, n)
		for i := range n {
			cmds[i] = add(pipe, i)
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	}
	cmds, err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// First use on this server (or after a restart): load and retry.
		if lerr := loadScript(ctx, x.rdb, script); lerr != nil {
			return nil, lerr
		}
		cmds, err = run()
	}
	if err != nil {
		for _, c := range cmds {
			if c.Err() != nil {
				return nil, c.Err()
			}
		}
		return nil, err
	}
	return cmds, nil
}

// loadScript loads s on every master.
func loadScript(ctx context.Context, rdb redis.UniversalClient, s *redis.Script) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return s.Load(ctx, c).Err() })
	}
	return s.Load(ctx, rdb).Err()
}

// Entry is a member of a StoreQueue or PrepareQueue with its score.
type Entry struct {
	ID       task.ID
	App      string // the app whose slot holds it
	At       time.Time
	Prepared bool // in the PrepareQueue: At is the lease expiry
}

// SlotRef names one slot of one app.
type SlotRef struct {
	App  string
	Slot int
}

// RangeSlots returns the members of the slots' StoreQueues and
// PrepareQueues after the cursor (from, after) with a score up to until:
// a score in [from, until] (ms), where a member scored from must sort after
// after (the zero ID: any). At most limit of each queue, in one pipeline
// (on Redis Cluster, one per master), and a second one for each queue
// whose first limit members from from held some at or before the cursor
// (a caller paging through more tasks than a page due in the same
// millisecond: scripts/range_after.lua).
// Entries are in no particular order.
func (x *Index) RangeSlots(ctx context.Context, refs []SlotRef, from time.Time, after task.ID, until time.Time, limit int) ([]Entry, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	rng := &redis.ZRangeBy{Min: ms(from), Max: ms(until), Count: int64(limit)}
	pipe := x.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, 0, 2*len(refs))
	for _, r := range refs {
		q := x.Queues(r.App, r.Slot)
		cmds = append(cmds, pipe.ZRangeByScoreWithScores(ctx, q.Store, rng), pipe.ZRangeByScoreWithScores(ctx, q.Prepare, rng))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisindex: range %d slots: %w", len(refs), err)
	}
	vals := make([][]redis.Z, len(cmds))
	var again []int // queues to read again after the cursor
	fromMs := float64(from.UnixMilli())
	var afterText string
	if after != (task.ID{}) {
		afterText = after.String()
	}
	for i, c := range cmds {
		zs := c.Val()
		if afterText != "" {
			// The members at or before the cursor lead: at from, up to after.
			k := 0
			for k < len(zs) && zs[k].Score == fromMs {
				if m, _ := zs[k].Member.(string); m > afterText {
					break
				}
				k++
			}
			if k > 0 && len(zs) == limit {
				// Fewer than limit after the cursor came, and the queue
				// has more: its next ones may sort before other queues'.
				again = append(again, i)
			}
			zs = zs[k:]
		}
		vals[i] = zs
	}
	if len(again) > 0 {
		rcmds, err := x.pipeline(ctx, rangeAfterScript, len(again), func(pipe redis.Pipeliner, j int) redis.Cmder {
			r := refs[again[j]/2]
			q := x.Queues(r.App, r.Slot)
			key := q.Store
			if again[j]%2 == 1 {
				key = q.Prepare
			}
			return rangeAfterScript.EvalSha(ctx, pipe, []string{key}, ms(from), afterText, ms(until), limit)
		})
		if err != nil {
			return nil, fmt.Errorf("redisindex: range %d queues after %s: %w", len(again), afterText, err)
		}
		for j, rc := range rcmds {
			flat, err := rc.(*redis.Cmd).StringSlice()
			if err != nil || len(flat)%2 != 0 {
				return nil, fmt.Errorf("redisindex: range after %s: %v (%d values)", afterText, err, len(flat))
			}
			zs := make([]redis.Z, 0, len(flat)/2)
			for p := 0; p < len(flat); p += 2 {
				score, err := strconv.ParseFloat(flat[p+1], 64)
				if err != nil {
					return nil, fmt.Errorf("redisindex: range after %s: score %q: %w", afterText, flat[p+1], err)
				}
				zs = append(zs, redis.Z{Member: flat[p], Score: score})
			}
			vals[again[j]] = zs
		}
	}
	n := 0
	for _, zs := range vals {
		n += len(zs)
	}
	out := make([]Entry, 0, n)
	for i, zs := range vals {
		for _, z := range zs {
			m, _ := z.Member.(string) // go-redis reads a member as a string
			id, err := task.ParseID(m)
			if err != nil {
				continue
			}
			out = append(out, Entry{ID: id, App: refs[i/2].App, At: time.UnixMilli(int64(z.Score)), Prepared: i%2 == 1})
		}
	}
	return out, nil
}
