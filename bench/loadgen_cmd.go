package main

import (
	"context"
	"io"

	"github.com/toc-dev/toc/bench/storesize"
	"github.com/toc-dev/toc/internal/cli"
	"github.com/toc-dev/toc/internal/loadgen"
)

// runLoadgen is the loadgen command, "bench loadgen ARGS": `toc bench`
// with the stores' flags (--redis, --redis-prefix, --sql, --sql-stats-wait),
// which read a cluster's Redis and PostgreSQL through package storesize:
// the benchmark code for them stays out of toc's binary. The suite runs
// the cluster's fire and pending this way.
func runLoadgen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cli.RunBench(ctx, args, stdout, stderr, stores)
}

// stores reads a cluster's stores for the load generator.
var stores = &cli.BenchStores{
	OpenRedis: func(addrs []string, prefix string) (cli.BenchRedis, func()) {
		r := storesize.OpenRedis(addrs, prefix)
		return redisStore{r}, func() { _ = r.Close() }
	},
	SQLSize:     storesize.PostgresSize,
	SQLCounters: sqlCounters,
}

// redisStore is a cluster's Redis as the load generator reads it.
type redisStore struct{ *storesize.Redis }

// Counters reads the cost counters of the Redis.
func (r redisStore) Counters(ctx context.Context) (loadgen.RedisCounters, error) {
	a, err := r.Activity(ctx)
	if err != nil {
		return loadgen.RedisCounters{}, err
	}
	// A process_id of another PID namespace (Redis in a container) names
	// no redis-server here.
	return loadgen.RedisCounters{Commands: a.Calls, OwnCommands: a.Own, Servers: loadgen.PIDsNamed(a.PIDs, "redis-server")}, nil
}

// sqlCounters reads the cost counters of the SQL databases of dsns.
func sqlCounters(dsns []string) func(context.Context) (loadgen.SQLCounters, error) {
	return func(ctx context.Context) (loadgen.SQLCounters, error) {
		a, err := storesize.ReadSQLActivity(ctx, dsns)
		if err != nil {
			return loadgen.SQLCounters{}, err
		}
		c := loadgen.SQLCounters{Xacts: a.Xacts, Statements: a.Statements, OwnXacts: a.OwnXacts, OwnStatements: a.OwnStatements}
		if a.MySQL {
			c.Servers, err = loadgen.ProcsNamed("mysqld", "mariadbd")
			return c, err
		}
		// Each server's postmaster: the parent of its backends and
		// workers.
		for _, pids := range a.Servers {
			if pm := loadgen.ParentNamed(pids, "postgres"); pm != 0 {
				c.Servers = append(c.Servers, pm)
			}
		}
		return c, nil
	}
}
