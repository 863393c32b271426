package storesize

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// commandstats is an INFO commandstats reply of Redis 7.
const commandstats = "# Commandstats\r\n" +
	"cmdstat_evalsha:calls=120,usec=900,usec_per_call=7.50,rejected_calls=0,failed_calls=1\r\n" +
	"cmdstat_zadd:calls=300,usec=450,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_client|setinfo:calls=4,usec=3,usec_per_call=0.75,rejected_calls=2,failed_calls=0\r\n" +
	"cmdstat_info:calls=7,usec=500,usec_per_call=71.43,rejected_calls=0,failed_calls=0\r\n"

func TestParseCommandStats(t *testing.T) {
	t.Parallel()
	got, err := parseCommandStats(commandstats)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"evalsha": 120, "zadd": 300, "client|setinfo": 4, "info": 7}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("parseCommandStats (-want +got):\n%s", d)
	}
	if got, err := parseCommandStats("# Commandstats\r\n"); err != nil || len(got) != 0 {
		t.Errorf("no commands yet: %v, %v; want none", got, err)
	}
	for _, bad := range []string{"cmdstat_get\r\n", "cmdstat_get:usec=1\r\n", "cmdstat_get:calls=x,usec=1\r\n"} {
		if _, err := parseCommandStats(bad); err == nil {
			t.Errorf("parseCommandStats(%q): no error", bad)
		}
	}
}

func TestParseMySQLStatus(t *testing.T) {
	t.Parallel()
	xacts, questions, err := parseMySQLStatus(map[string]string{"Com_commit": "40", "Com_rollback": "2", "Questions": "1234"})
	if err != nil || xacts != 42 || questions != 1234 {
		t.Errorf("parseMySQLStatus = %d, %d, %v; want 42, 1234", xacts, questions, err)
	}
	for _, bad := range []map[string]string{
		{"Com_commit": "40", "Questions": "1"},
		{"Com_commit": "x", "Com_rollback": "0", "Questions": "1"},
	} {
		if _, _, err := parseMySQLStatus(bad); err == nil {
			t.Errorf("parseMySQLStatus(%v): no error", bad)
		}
	}
}

func TestMySQLDSN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dsn                  string
		mysql                bool
		user, pass, addr, db string
	}{
		{"mysql://toc:pw@db.example:3307/tasks", true, "toc", "pw", "db.example:3307", "tasks"},
		{"mariadb://root@127.0.0.1/t", true, "root", "", "127.0.0.1:3306", "t"},
		{"mysql://root@tcp(127.0.0.1:3306)/toc_t", true, "root", "", "127.0.0.1:3306", "toc_t"},
		{"u:p@tcp(h:1)/d", true, "u", "p", "h:1", "d"},
		{"postgres://postgres@127.0.0.1:5432/x", false, "", "", "", ""},
	} {
		cfg, isMySQL, err := mysqlDSN(tc.dsn)
		if err != nil || isMySQL != tc.mysql {
			t.Errorf("%s: mysql %v, %v; want %v", tc.dsn, isMySQL, err, tc.mysql)
			continue
		}
		if !isMySQL {
			continue
		}
		if cfg.User != tc.user || cfg.Passwd != tc.pass || cfg.Addr != tc.addr || cfg.DBName != tc.db {
			t.Errorf("%s: %s:%s@%s/%s, want %s:%s@%s/%s", tc.dsn, cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName, tc.user, tc.pass, tc.addr, tc.db)
		}
	}
}
