package testsvc

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the MariaDB/MySQL test databases
	"github.com/jackc/pgx/v5"
)

const (
	pgStart    = "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
	mysqlStart = "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"
)

// PostgresDB creates a fresh database on the test PostgreSQL ($TOC_TEST_PG_HOST
// or 127.0.0.1:5432, user postgres, trust auth), drops it when the test ends,
// and returns its toc DSN.
func PostgresDB(t testing.TB) string {
	t.Helper()
	host := envOr("TOC_TEST_PG_HOST", "127.0.0.1:5432")
	admin := "postgres://postgres@" + host + "/postgres?sslmode=disable"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		Missing(t, "PostgreSQL", host, pgStart, err)
	}
	name := "toc_t_" + Token()
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	conn.Close(ctx)
	if err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, admin); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	return "postgres://postgres@" + host + "/" + name + "?sslmode=disable"
}

// MySQLDB is PostgresDB for the test MariaDB ($TOC_TEST_MYSQL_HOST or
// 127.0.0.1:3306, user root, no password).
func MySQLDB(t testing.TB) string {
	t.Helper()
	host := envOr("TOC_TEST_MYSQL_HOST", "127.0.0.1:3306")
	db, err := sql.Open("mysql", "root@tcp("+host+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		Missing(t, "MariaDB", host, mysqlStart, err)
	}
	name := "toc_t_" + Token()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		d, err := sql.Open("mysql", "root@tcp("+host+")/")
		if err != nil {
			return
		}
		defer d.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = d.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
	})
	return "mysql://root@tcp(" + host + ")/" + name
}

func envOr(k, def string) string {
	if v := strings.TrimSpace(os.Getenv(k)); v != "" {
		return v
	}
	return def
}
