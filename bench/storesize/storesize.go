// Package storesize measures what a toc cluster keeps in its shared stores,
// for `toc bench --workload pending`: the memory of its Redis and the size
// of its PostgreSQL databases. For the suite (bench/suite) it also creates and
// drops a cluster's database, deletes its keys and reads the services'
// versions. It is the one package of the benchmark that imports their
// drivers.
package storesize

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// Redis reads the memory of a Redis server, or of every master of a Redis
// Cluster.
type Redis struct {
	c      redis.UniversalClient
	prefix string
}

// OpenRedis connects lazily to the Redis at addrs (several: a Redis
// Cluster, as `toc serve --redis` takes them). prefix is the cluster's
// --redis-prefix: [Redis.Prefix] measures the keys under "prefix:".
func OpenRedis(addrs []string, prefix string) *Redis {
	return &Redis{c: redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs}), prefix: prefix}
}

// Close closes the connections.
func (r *Redis) Close() error { return r.c.Close() }

// eachNode calls fn with the server, or with each master of a cluster, one
// at a time (ForEachMaster calls it from a goroutine per master: fn may
// add to its caller's sums).
func (r *Redis) eachNode(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	switch c := r.c.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return fn(ctx, n)
		})
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("storesize: unexpected Redis client %T", r.c)
}

// UsedMemory is used_memory of INFO memory, summed over the masters: all of
// the server's data, so other clients of a shared Redis count too.
func (r *Redis) UsedMemory(ctx context.Context) (int64, error) {
	var total int64
	err := r.eachNode(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		v, err := infoField(info, "used_memory")
		total += v
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("redis used_memory: %w", err)
	}
	return total, nil
}

// infoField reads an integer field of an INFO reply ("name:value" lines).
func infoField(info, name string) (int64, error) {
	for line := range strings.Lines(info) {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":")
		if ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in INFO", name)
}

// Prefix returns how many keys there are under "prefix:" and their memory
// as MEMORY USAGE counts it (every element, SAMPLES 0): the cluster's own
// share of a shared Redis.
func (r *Redis) Prefix(ctx context.Context) (keys, bytes int64, err error) {
	err = r.eachNode(ctx, func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, r.prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			n, err := c.MemoryUsage(ctx, iter.Val(), 0).Result()
			if errors.Is(err, redis.Nil) {
				continue // deleted since the scan saw it
			}
			if err != nil {
				return err
			}
			keys++
			bytes += n
		}
		return iter.Err()
	})
	if err != nil {
		return 0, 0, fmt.Errorf("redis keys under %s: %w", r.prefix, err)
	}
	return keys, bytes, nil
}

// PostgresSize is pg_database_size of each DSN's database, summed (the DSNs
// as `toc serve --sql` takes them, one per shard). Only PostgreSQL is
// measured: a DSN of another scheme is an error.
func PostgresSize(ctx context.Context, dsns []string) (int64, error) {
	var total int64
	for i, dsn := range dsns {
		if u, err := url.Parse(dsn); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return 0, fmt.Errorf("sql size: DSN %d: only postgres:// databases are measured", i+1)
		}
		n, err := postgresSize(ctx, dsn)
		if err != nil {
			return 0, fmt.Errorf("sql size: DSN %d: %w", i+1, err)
		}
		total += n
	}
	return total, nil
}

func postgresSize(ctx context.Context, dsn string) (int64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int64
	err = conn.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&n)
	return n, err
}

// Ping checks that the Redis answers.
func (r *Redis) Ping(ctx context.Context) error {
	return r.eachNode(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
}

// Version returns redis_version of INFO server and the appendonly setting,
// of the server or of one master of a cluster.
func (r *Redis) Version(ctx context.Context) (version, appendOnly string, err error) {
	err = r.eachNode(ctx, func(ctx context.Context, c *redis.Client) error {
		if version != "" {
			return nil
		}
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				version = v
			}
		}
		cfg, err := c.ConfigGet(ctx, "appendonly").Result()
		if err != nil {
			return err
		}
		appendOnly = cfg["appendonly"]
		return nil
	})
	if err != nil {
		return "", "", fmt.Errorf("redis version: %w", err)
	}
	return version, appendOnly, nil
}

// DeletePrefix deletes every key under "prefix:" and returns how many
// there were.
func (r *Redis) DeletePrefix(ctx context.Context) (int64, error) {
	var n int64
	err := r.eachNode(ctx, func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, r.prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			d, err := c.Del(ctx, iter.Val()).Result()
			if err != nil {
				return err
			}
			n += d
		}
		return iter.Err()
	})
	if err != nil {
		return n, fmt.Errorf("redis: delete keys under %s: %w", r.prefix, err)
	}
	return n, nil
}

// Queues counts the members of the cluster's store and prepare queues
// (sorted sets "prefix:{tag}:store" and "prefix:{tag}:prepare"), summed
// over the tags.
func (r *Redis) Queues(ctx context.Context) (store, prepare int64, err error) {
	err = r.eachNode(ctx, func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, r.prefix+":{*}:*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			var sum *int64
			switch {
			case strings.HasSuffix(k, ":store"):
				sum = &store
			case strings.HasSuffix(k, ":prepare"):
				sum = &prepare
			default:
				continue
			}
			n, err := c.ZCard(ctx, k).Result()
			if err != nil {
				return fmt.Errorf("zcard %s: %w", k, err)
			}
			*sum += n
		}
		return iter.Err()
	})
	if err != nil {
		return 0, 0, fmt.Errorf("redis queues under %s: %w", r.prefix, err)
	}
	return store, prepare, nil
}

// PostgresVersion is the server_version of the PostgreSQL at dsn.
func PostgresVersion(ctx context.Context, dsn string) (string, error) {
	var v string
	err := withPostgres(ctx, dsn, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SHOW server_version").Scan(&v)
	})
	if err != nil {
		return "", fmt.Errorf("postgres version: %w", err)
	}
	return v, nil
}

// CreateDatabase creates database name, connected to the server through
// dsn (a DSN of another database of it).
func CreateDatabase(ctx context.Context, dsn, name string) error {
	err := withPostgres(ctx, dsn, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		return err
	})
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// DropDatabase drops database name if it exists, closing its connections
// (WITH (FORCE), PostgreSQL 13 and later).
func DropDatabase(ctx context.Context, dsn, name string) error {
	err := withPostgres(ctx, dsn, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		return err
	})
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

func withPostgres(ctx context.Context, dsn string, fn func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return fn(conn)
}
