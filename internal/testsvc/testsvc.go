// Package testsvc gives tests the real services toc runs against (Redis for
// now), isolated per test, and decides what happens when one is missing:
// skip with a message saying how to start it on a developer's machine, fail
// under CI=true.
package testsvc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Missing skips the test, or fails it when CI=true, saying how to start the
// service.
func Missing(t testing.TB, service, addr, start string, err error) {
	t.Helper()
	unavailable(t, service+" is not reachable at "+addr+" ("+err.Error()+"); start it with: "+start)
}

// NotInstalled skips the test, or fails it when CI=true, saying how to
// install the program it runs (a broker it starts on ports of its own).
func NotInstalled(t testing.TB, program, install string, err error) {
	t.Helper()
	unavailable(t, program+" is not installed ("+err.Error()+"); install it with: "+install)
}

func unavailable(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// RedisAddr is the Redis the tests use: $TOC_TEST_REDIS or 127.0.0.1:6379.
func RedisAddr() string {
	if a := os.Getenv("TOC_TEST_REDIS"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

const redisStart = `redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log`

// Redis returns a client of the test Redis and a key prefix of the test's
// own. Keys under the prefix are deleted when the test ends.
func Redis(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	addr := RedisAddr()
	c := redis.NewClient(&redis.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		Missing(t, "Redis", addr, redisStart, err)
	}
	prefix := "toctest-" + Token()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		DeletePrefix(ctx, c, prefix)
		c.Close()
	})
	return c, prefix
}

// DeletePrefix deletes every key that starts with prefix.
func DeletePrefix(ctx context.Context, c redis.UniversalClient, prefix string) {
	del := func(ctx context.Context, n *redis.Client) error {
		iter := n.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			n.Del(ctx, iter.Val())
		}
		return iter.Err()
	}
	switch cc := c.(type) {
	case *redis.ClusterClient:
		_ = cc.ForEachMaster(ctx, del)
	case *redis.Client:
		_ = del(ctx, cc)
	}
}

// Token returns 12 random hex digits, for names of the test's own.
func Token() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
