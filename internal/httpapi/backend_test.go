package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/toc-dev/toc/internal/cluster"
	"github.com/toc-dev/toc/internal/store"
	"github.com/toc-dev/toc/internal/store/pebblestore"
	"github.com/toc-dev/toc/internal/store/redisindex"
	"github.com/toc-dev/toc/internal/store/sqlstore"
	"github.com/toc-dev/toc/internal/testsvc"
	"github.com/toc-dev/toc/task"
)

// The behaviour tests of this package are mode-independent: they run the
// same API over whichever backend $TOC_TEST_BACKEND names:
//
//	embedded      Pebble in a temp dir (the default)
//	postgres      PostgreSQL + standalone Redis, as one cluster node
//	mysql         MariaDB + standalone Redis
//	rediscluster  PostgreSQL + a three-master Redis Cluster that TestMain
//	              starts from local redis-server processes
//
// test.sh runs the package once per backend.
var backendName = func() string {
	if b := os.Getenv("TOC_TEST_BACKEND"); b != "" {
		return b
	}
	return "embedded"
}()

// redisCluster is started by TestMain for the rediscluster backend.
var redisCluster *testsvc.RedisCluster

func TestMain(m *testing.M) {
	code := func() int {
		switch backendName {
		case "embedded", "postgres", "mysql":
		case "rediscluster":
			dir, err := os.MkdirTemp("", "toc-redis-cluster-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			rc, err := testsvc.StartRedisCluster(ctx, dir)
			cancel()
			if err != nil {
				fmt.Fprintln(os.Stderr, "start a Redis Cluster:", err)
				return 1
			}
			defer rc.Stop()
			redisCluster = rc
		default:
			fmt.Fprintf(os.Stderr, "TOC_TEST_BACKEND=%q: want embedded, postgres, mysql or rediscluster\n", backendName)
			return 2
		}
		return m.Run()
	}()
	// After the Redis Cluster has stopped, so that its clients are gone too:
	// every goroutine has an owner that waits for it (STYLE.md 8).
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

type backend struct {
	store    store.Store
	node     *cluster.Node
	index    *redisindex.Index
	rdb      redis.UniversalClient
	prefix   string
	shardFor func(app, key string, id task.ID) uint16
	closers  []func() error
}

func (b *backend) close() error {
	var errs []error
	for i := len(b.closers) - 1; i >= 0; i-- {
		errs = append(errs, b.closers[i]())
	}
	return errors.Join(errs...)
}

// clusterEnvs maps a test's "data dir" to its databases and Redis prefix,
// so that reopening the same dir reopens the same cluster state.
var clusterEnvs sync.Map // dir → clusterEnv

type clusterEnv struct{ dsn, prefix string }

func openBackend(t *testing.T, dir string, log *slog.Logger) *backend {
	t.Helper()
	if backendName == "embedded" {
		st, err := pebblestore.Open(pebblestore.Options{Dir: dir, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		return &backend{store: st, closers: []func() error{st.Close}}
	}
	var rdb redis.UniversalClient
	if redisCluster != nil {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: redisCluster.Addrs})
	} else {
		c, _ := testsvc.Redis(t) // skips, or fails under CI, without Redis
		c.Close()
		rdb = redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr()})
	}
	v, ok := clusterEnvs.Load(dir)
	env, _ := v.(clusterEnv)
	if !ok {
		env.prefix = "toctest-" + testsvc.Token()
		if backendName == "mysql" {
			env.dsn = testsvc.MySQLDB(t)
		} else {
			env.dsn = testsvc.PostgresDB(t)
		}
		clusterEnvs.Store(dir, env)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c := rdb
			if redisCluster != nil {
				c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: redisCluster.Addrs})
			} else {
				c = redis.NewClient(&redis.Options{Addr: testsvc.RedisAddr()})
			}
			testsvc.DeletePrefix(ctx, c, env.prefix)
			c.Close()
		})
	}
	b := &backend{closers: []func() error{rdb.Close}}
	st, err := sqlstore.Open(context.Background(), sqlstore.Options{DSNs: []string{env.dsn}, Tables: 4, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	b.store, b.shardFor = st, st.ShardFor
	b.closers = append(b.closers, st.Close)
	x, err := redisindex.New(redisindex.Options{Client: rdb, Prefix: env.prefix, Slots: 8, HotWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	node, err := cluster.New(cluster.Config{Redis: rdb, Index: x, SQL: st, Prefix: env.prefix, Logger: log,
		Heartbeat: 200 * time.Millisecond, MemberTTL: time.Second, RepairEvery: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b.node, b.index, b.rdb, b.prefix = node, x, rdb, env.prefix
	return b
}

// forgetRedis deletes every Redis queue of app and its entry in the apps
// set, as a Redis that lost its keys would: the Redis side of its tasks is
// lost, SQL keeps them.
func (s *server) forgetRedis(ctx context.Context, app string) error {
	x := s.be.index
	for slot := range x.Slots() {
		q := x.Queues(app, slot)
		// The keys of a slot share a hash tag: one DEL on Redis Cluster too.
		if err := s.be.rdb.Del(ctx, q.Store, q.Prepare, q.Dead, q.Attempts, q.Pull).Err(); err != nil {
			return fmt.Errorf("forget %s/%d: %w", app, slot, err)
		}
	}
	if err := s.be.rdb.SRem(ctx, s.be.prefix+":apps", app).Err(); err != nil {
		return fmt.Errorf("forget %s: %w", app, err)
	}
	x.ForgetRegistrations()
	return nil
}
