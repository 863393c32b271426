package sqlstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/go-cmp/cmp"

	"github.com/toc-dev/toc/internal/store/sqlstore"
	"github.com/toc-dev/toc/task"
)

// mysqlConn is what a MySQL DSN parses to, in the fields the tests check.
type mysqlConn struct {
	User, Passwd, Net, Addr, DBName string
	Params                          map[string]string
	TLSConfig                       string
	Timeout                         time.Duration
	Loc                             string
}

// TestMySQLDSN checks every MySQL form: the URL (mysql:// or mariadb://)
// and the driver's own, with its scheme or without.
func TestMySQLDSN(t *testing.T) {
	t.Parallel()
	local := mysqlConn{User: "root", Net: "tcp", Addr: "127.0.0.1:3306", DBName: "toc", Loc: "UTC"}
	with := func(f func(c *mysqlConn)) mysqlConn {
		c := local
		f(&c)
		return c
	}
	for _, tt := range []struct {
		dsn  string
		want mysqlConn
	}{
		// URLs.
		{"mysql://root@127.0.0.1:3306/toc", local},
		{"mariadb://root@127.0.0.1:3306/toc", local},
		{"MySQL://root@127.0.0.1/toc", local}, // the port defaults to 3306
		{" mysql://root@127.0.0.1:3306/toc ", local},
		{"mysql://root@db.example:3307/toc", with(func(c *mysqlConn) { c.Addr = "db.example:3307" })},
		{"mysql://root@[::1]:3306/toc", with(func(c *mysqlConn) { c.Addr = "[::1]:3306" })},
		{"mysql://root@[::1]/toc", with(func(c *mysqlConn) { c.Addr = "[::1]:3306" })},
		{"mysql://root@[fe80::1%25eth0]:3306/toc", with(func(c *mysqlConn) { c.Addr = "[fe80::1%eth0]:3306" })},
		{"mysql://127.0.0.1/toc", with(func(c *mysqlConn) { c.User = "" })},
		{"mysql://root:pw@127.0.0.1/toc", with(func(c *mysqlConn) { c.Passwd = "pw" })},
		{"mysql://r%40corp:p%40ss%3Aw%2Frd%23%25%3F@127.0.0.1/toc", with(func(c *mysqlConn) { c.User, c.Passwd = "r@corp", "p@ss:w/rd#%?" })},
		{"mysql://root:p@ss@127.0.0.1/toc", with(func(c *mysqlConn) { c.Passwd = "p@ss" })}, // the last @ ends the password
		{"mysql://root@127.0.0.1/t%C3%B6c", with(func(c *mysqlConn) { c.DBName = "töc" })},
		{"mysql://root@127.0.0.1/toc?tls=skip-verify&timeout=5s&time_zone=%27%2B00%3A00%27&loc=Europe/Paris", with(func(c *mysqlConn) {
			c.TLSConfig, c.Timeout, c.Params, c.Loc = "skip-verify", 5*time.Second, map[string]string{"time_zone": "'+00:00'"}, "Europe/Paris"
		})},
		// The driver's form.
		{"mysql://root@tcp(127.0.0.1:3306)/toc", local},
		{"mariadb://root@tcp(127.0.0.1:3306)/toc", local},
		{"root@tcp(127.0.0.1:3306)/toc", local},
		{"mysql://root@/toc", local}, // the driver's default address
		{"mysql://root@tcp/toc", local},
		{"mysql:///toc", with(func(c *mysqlConn) { c.User = "" })},
		{"mysql://tcp(127.0.0.1:3306)/toc", with(func(c *mysqlConn) { c.User = "" })},
		{"mysql://root:p@ss:w/rd@tcp(127.0.0.1:3306)/toc", with(func(c *mysqlConn) { c.Passwd = "p@ss:w/rd" })},
		{"mysql://root@tcp([::1]:3306)/toc?tls=true&sql_mode=ANSI", with(func(c *mysqlConn) {
			c.Addr, c.TLSConfig, c.Params = "[::1]:3306", "true", map[string]string{"sql_mode": "ANSI"}
		})},
		{"mysql://root@unix(/run/mysqld/mysqld.sock)/toc", with(func(c *mysqlConn) { c.Net, c.Addr = "unix", "/run/mysqld/mysqld.sock" })},
		{"mysql://root@unix/toc", with(func(c *mysqlConn) { c.Net, c.Addr = "unix", "/tmp/mysql.sock" })},
	} {
		if err := sqlstore.CheckDSN(tt.dsn); err != nil {
			t.Errorf("CheckDSN(%q) = %v", tt.dsn, err)
			continue
		}
		cfg, err := sqlstore.MySQLConfig(tt.dsn)
		if err != nil {
			t.Errorf("MySQLConfig(%q) = %v", tt.dsn, err)
			continue
		}
		got := mysqlConn{cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName, cfg.Params, cfg.TLSConfig, cfg.Timeout, cfg.Loc.String()}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("MySQLConfig(%q) (-want +got):\n%s", tt.dsn, diff)
		}
	}
}

// TestPostgresDSN checks the PostgreSQL forms.
func TestPostgresDSN(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://toc:pw@db:5432/toc?sslmode=disable",
		"postgresql://toc@db/toc",
		"Postgres://toc@[::1]:5432/toc",
		"postgres://toc:p%40ss@db/toc",
	} {
		if err := sqlstore.CheckDSN(dsn); err != nil {
			t.Errorf("CheckDSN(%q) = %v", dsn, err)
		}
	}
}

// TestBadDSN checks that a DSN the store cannot use is refused with what is
// wrong and the forms it accepts, and never with its password.
func TestBadDSN(t *testing.T) {
	t.Parallel()
	const (
		all   = "use postgres://user:pass@host:5432/db or mysql://user:pass@host:3306/db (or the MySQL driver's form user:pass@tcp(host:3306)/db)"
		my    = "; use mysql://user:pass@host:3306/db (or the MySQL driver's form user:pass@tcp(host:3306)/db)"
		pg    = "; use postgres://user:pass@host:5432/db"
		noSQL = "not a PostgreSQL or MySQL DSN; " + all
	)
	for _, tt := range []struct {
		dsn  string
		want []string
	}{
		{"", []string{`"": ` + noSQL}},
		{"host=db password=s3cret dbname=toc", []string{`"host=db password=xxxxx dbname=toc": ` + noSQL}},
		{"redis://:s3cret@db:6379", []string{`"redis://:xxxxx@db:6379": ` + noSQL}},
		{"db:3306/toc", []string{noSQL}},
		{"mysql://root:s3cret@db:3306", []string{`"mysql://root:xxxxx@db:3306": names no database` + my}},
		{"mysql://root:s3cret@db:3306/", []string{"names no database" + my}},
		{"mysql://root:s3cret@tcp(db:3306)/", []string{`"mysql://root:xxxxx@tcp(db:3306)/": names no database` + my}},
		{"mysql://root:s3cret@db:99999/toc", []string{"has port 99999, not 1 to 65535" + my}},
		{"mysql://root:s3cret@:3306/toc", []string{"names no host" + my}},
		{"mysql://root:s3cret@/run/mysqld/mysqld.sock/toc", []string{"unix sockets are not supported in the URL form: use the driver's form, mysql://user:pass@unix(/path/to/mysqld.sock)/db"}},
		{"mysql://root:s3cret@localhost/toc?socket=/run/mysqld/mysqld.sock", []string{"has a socket parameter: unix sockets are not supported in the URL form"}},
		{"mysql://root@db/toc?password=s3cret", []string{`"mysql://root@db/toc?password=xxxxx": has a password parameter`}},
		{"mysql://root:s3cr/et@db/toc", []string{`"mysql://root:xxxxx@db/toc": cannot be parsed with its password`}},
		{"mysql://root:s3cr#et@db/toc", []string{"mysql://root:xxxxx@db/toc", my}},
		{"mysql://root:s3cret@db/toc#x", []string{"has a #fragment"}},
		{"mysql://root:s3cret@db/toc?tls=bogus", []string{"unknown config name: bogus" + my}},
		{"mysql://root:s3cret@db/toc?strict=true", []string{"strict mode has been removed"}},
		{"mysql://root:s3cret@db/toc?timeout=soon", []string{`invalid duration "soon"`}},
		{"mysql://root:s3cret@tcp(db:3306/toc", []string{`"mysql://root:xxxxx@tcp(db:3306/toc": has a host with ( or ) in it` + my}},
		{"mysql://root:s3cret@tcp6/toc?strict=1", []string{my}},
		{"postgres://toc:s3cret@db:port/toc", []string{`"postgres://toc:xxxxx@db:port/toc": `, pg}},
		{"postgres://toc@db/toc?password=s3cret&sslmode=bogus", []string{"sslmode", pg}},
	} {
		err := sqlstore.CheckDSN(tt.dsn)
		if err == nil {
			t.Errorf("CheckDSN(%q) = nil, want an error", tt.dsn)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("CheckDSN(%q) = %v\nwant it to contain %q", tt.dsn, err, w)
			}
		}
		if strings.Contains(err.Error(), "s3cr") {
			t.Errorf("CheckDSN(%q) = %v: shows the password", tt.dsn, err)
		}
		_, oerr := sqlstore.Open(context.Background(), sqlstore.Options{DSNs: []string{"postgres://db/toc", tt.dsn}})
		if oerr == nil || !strings.Contains(oerr.Error(), "Options.DSNs[1] "+err.Error()) {
			t.Errorf("Open(…, %q) = %v, want Options.DSNs[1] %v", tt.dsn, oerr, err)
		}
	}
}

// TestRedactDSN checks the masking of passwords in messages.
func TestRedactDSN(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ dsn, want string }{
		{"postgres://toc@db/toc", "postgres://toc@db/toc"},
		{"postgres://toc:pw@db/toc", "postgres://toc:xxxxx@db/toc"},
		{"postgres://toc@db/toc?password=pw&sslmode=disable", "postgres://toc@db/toc?password=xxxxx&sslmode=disable"},
		{"mysql://root:p%40ss@[::1]:3306/toc", "mysql://root:xxxxx@[::1]:3306/toc"},
		{"mysql://root:p@ss:w/rd@tcp(db)/toc", "mysql://root:xxxxx@tcp(db)/toc"},
		{"root:p/w@tcp(db)/toc?loc=Europe/Paris", "root:xxxxx@tcp(db)/toc?loc=Europe/Paris"},
		{"mysql://root:p/w@db", "mysql://root:xxxxx@db"},
		{"host=db password='p w' user=toc", "host=db password=xxxxx user=toc"},
		{"mysql://root@db:3306/toc", "mysql://root@db:3306/toc"},
	} {
		if got := sqlstore.RedactDSN(tt.dsn); got != tt.want {
			t.Errorf("RedactDSN(%q) = %q, want %q", tt.dsn, got, tt.want)
		}
	}
}

// TestOpenURL opens a store through the URL forms, on MariaDB with a user
// whose name and password need percent-encoding, and writes and reads a
// task.
func TestOpenURL(t *testing.T) {
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			sv.use(t)
			dsn := sv.databases(t, 1)[0]
			if sv.name == "postgres" {
				dsn = "postgresql" + strings.TrimPrefix(dsn, "postgres")
			} else {
				cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, "mysql://"))
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Net != "tcp" {
					t.Skipf("%s is on %s, not tcp", sv.env, cfg.Net)
				}
				var b [4]byte
				rand.Read(b[:])
				user, pass := "toc@"+hex.EncodeToString(b[:]), "p@ss:w/rd#%?"
				acct := "'" + user + "'@'%'"
				if err := sv.execOn(t, dsn, "CREATE USER "+acct+" IDENTIFIED BY '"+pass+"'", "GRANT ALL ON `"+cfg.DBName+"`.* TO "+acct); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sv.execOn(t, dsn, "DROP USER IF EXISTS "+acct) })
				u := url.URL{Scheme: "mariadb", User: url.UserPassword(user, pass), Host: cfg.Addr, Path: "/" + cfg.DBName, RawQuery: "timeout=10s&time_zone=%27%2B00%3A00%27"}
				dsn = u.String()
			}
			t.Log(sqlstore.RedactDSN(dsn))
			s := open(t, []string{dsn})
			defer s.Close()
			var gen task.IDGenerator
			tk := newTask(s, &gen, "app", "k", epoch)
			ctx := context.Background()
			if _, err := s.Create(ctx, []*task.Task{tk}); err != nil {
				t.Fatalf("Create: %v", err)
			}
			got, err := s.Get(ctx, tk.ID)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if got.ID != tk.ID || got.Key != "k" {
				t.Errorf("Get = %+v, want %+v", got, tk)
			}
		})
	}
}
