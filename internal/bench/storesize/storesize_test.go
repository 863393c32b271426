package storesize_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toc-dev/toc/internal/bench/storesize"
	"github.com/toc-dev/toc/internal/testsvc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRedis(t *testing.T) {
	t.Parallel()
	c, prefix := testsvc.Redis(t) // skips without Redis; deletes the prefix's keys
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := storesize.OpenRedis([]string{testsvc.RedisAddr()}, prefix)
	defer r.Close()

	used, err := r.UsedMemory(ctx)
	if err != nil || used <= 0 {
		t.Fatalf("UsedMemory = %d, %v; want > 0", used, err)
	}
	keys, bytes, err := r.Prefix(ctx)
	if err != nil || keys != 0 || bytes != 0 {
		t.Fatalf("Prefix of an empty prefix = %d keys, %d bytes, %v; want 0, 0", keys, bytes, err)
	}
	members := make([]any, 0, 200)
	for i := range 100 {
		members = append(members, i, fmt.Sprintf("member-%020d", i))
	}
	if err := c.Do(ctx, append([]any{"ZADD", prefix + ":{x}:store"}, members...)...).Err(); err != nil {
		t.Fatal(err)
	}
	// Not under "prefix:", so not counted (the cleanup deletes it: it
	// starts with prefix).
	if err := c.Set(ctx, prefix+"-other", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	keys, bytes, err = r.Prefix(ctx)
	if err != nil || keys != 1 || bytes < 100*20 {
		t.Errorf("Prefix = %d keys, %d bytes, %v; want 1 key of at least 2000 bytes", keys, bytes, err)
	}
}

func TestPostgresSize(t *testing.T) {
	t.Parallel()
	dsn := testsvc.PostgresDB(t) // skips without PostgreSQL; drops the database
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	one, err := storesize.PostgresSize(ctx, []string{dsn})
	if err != nil || one <= 0 {
		t.Fatalf("PostgresSize = %d, %v; want > 0", one, err)
	}
	two, err := storesize.PostgresSize(ctx, []string{dsn, dsn})
	if err != nil || two != 2*one {
		t.Errorf("PostgresSize of the database twice = %d, %v; want %d", two, err, 2*one)
	}
	for _, bad := range []string{"mysql://root@tcp(127.0.0.1:3306)/toc", "::"} {
		if _, err := storesize.PostgresSize(ctx, []string{bad}); err == nil || !strings.Contains(err.Error(), "only postgres://") {
			t.Errorf("PostgresSize(%q) = %v, want an error saying only postgres:// is measured", bad, err)
		}
	}
}
