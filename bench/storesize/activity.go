package storesize

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// What the services have done so far, for the cost of fires (`toc bench
// --workload fire` on a cluster): the commands a Redis has run and the
// transactions and statements of the SQL databases, as cumulative counters
// that a benchmark reads before and after a window.

// RedisActivity is a Redis's command counters at one moment, summed over
// its masters.
type RedisActivity struct {
	// Calls are the calls of INFO commandstats: every command run so far,
	// those of Lua scripts included.
	Calls int64
	// Own are the reading's own commands (INFO commandstats and INFO server
	// on each master) that later readings count and its own does not.
	Own int64
	// PIDs are the masters' process ids (INFO server's process_id).
	PIDs []int
}

// CommandStats returns the calls of each command of INFO commandstats
// ("get", "evalsha", "client|setinfo"), summed over the masters.
func (r *Redis) CommandStats(ctx context.Context) (map[string]int64, error) {
	sum := map[string]int64{}
	err := r.eachNode(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		calls, err := parseCommandStats(info)
		for name, n := range calls {
			sum[name] += n
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redis commandstats: %w", err)
	}
	return sum, nil
}

// Activity reads the calls of every command so far and the masters' pids.
func (r *Redis) Activity(ctx context.Context) (RedisActivity, error) {
	var a RedisActivity
	err := r.eachNode(ctx, func(ctx context.Context, c *redis.Client) error {
		// commandstats first: its own call is counted only after it has
		// answered, as is the INFO server after it.
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		calls, err := parseCommandStats(info)
		if err != nil {
			return err
		}
		for _, n := range calls {
			a.Calls += n
		}
		info, err = c.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		pid, err := infoField(info, "process_id")
		if err != nil {
			return err
		}
		a.PIDs = append(a.PIDs, int(pid))
		a.Own += 2
		return nil
	})
	if err != nil {
		return RedisActivity{}, fmt.Errorf("redis activity: %w", err)
	}
	return a, nil
}

// parseCommandStats parses an INFO commandstats reply: lines
// "cmdstat_NAME:calls=N,usec=...", returning the calls of each NAME.
func parseCommandStats(info string) (map[string]int64, error) {
	calls := map[string]int64{}
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("commandstats line %q: no ':'", line)
		}
		found := false
		for f := range strings.SplitSeq(fields, ",") {
			v, ok := strings.CutPrefix(f, "calls=")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("commandstats line %q: %w", line, err)
			}
			calls[name] += n
			found = true
		}
		if !found {
			return nil, fmt.Errorf("commandstats line %q: no calls=", line)
		}
	}
	return calls, nil
}

// SQLActivity is the transaction and statement counters of SQL databases at
// one moment.
type SQLActivity struct {
	// Xacts are the transactions committed and rolled back so far: of each
	// PostgreSQL DSN's database (pg_stat_database's xact_commit +
	// xact_rollback, which each backend flushes up to 10 s late when it
	// goes idle), or of each MySQL server as a whole (Com_commit +
	// Com_rollback: explicit COMMIT and ROLLBACK statements only, of every
	// client).
	Xacts int64
	// Statements are the statements so far: the calls of
	// pg_stat_statements in the databases, when the extension is installed
	// in every one of them; MySQL's Questions. -1 when unknown.
	Statements int64
	// OwnXacts and OwnStatements are the reading's own transactions and
	// statements that later readings count and its own does not.
	OwnXacts, OwnStatements int64
	// MySQL is set when the DSNs are MySQL's.
	MySQL bool
	// PostgreSQL only: the pids of each server's processes other than the
	// reading's own backend, as pg_stat_activity lists them (backends and
	// background workers, not the postmaster: their parent is it).
	Servers [][]int
}

// ReadSQLActivity reads the counters of the databases of dsns (as `toc
// serve --sql` takes them: all PostgreSQL or all MySQL). DSNs naming the
// same database (PostgreSQL) or the same server (MySQL) count once.
func ReadSQLActivity(ctx context.Context, dsns []string) (SQLActivity, error) {
	var a SQLActivity
	seen := map[string]bool{}
	known := true
	for i, dsn := range dsns {
		mysqlCfg, isMySQL, err := mysqlDSN(dsn)
		if err != nil {
			return SQLActivity{}, fmt.Errorf("sql activity: DSN %d: %w", i+1, err)
		}
		if i > 0 && isMySQL != a.MySQL {
			return SQLActivity{}, fmt.Errorf("sql activity: DSN %d: mixes PostgreSQL and MySQL", i+1)
		}
		a.MySQL = isMySQL
		if isMySQL {
			if seen[mysqlCfg.Addr] {
				continue
			}
			seen[mysqlCfg.Addr] = true
			xacts, questions, err := mysqlActivity(ctx, mysqlCfg)
			if err != nil {
				return SQLActivity{}, fmt.Errorf("sql activity: DSN %d: %w", i+1, err)
			}
			// Questions counts the SHOW that read it; later readings count
			// it too.
			a.Xacts += xacts
			a.Statements += questions - 1
			a.OwnStatements++
			continue
		}
		u, err := url.Parse(dsn)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return SQLActivity{}, fmt.Errorf("sql activity: DSN %d: want postgres:// or mysql://", i+1)
		}
		key := u.Host + u.Path
		if seen[key] {
			continue
		}
		seen[key] = true
		p, err := postgresActivity(ctx, dsn)
		if err != nil {
			return SQLActivity{}, fmt.Errorf("sql activity: DSN %d: %w", i+1, err)
		}
		a.Xacts += p.xacts
		a.OwnXacts += p.ownXacts
		if p.statements < 0 {
			known = false
		}
		a.Statements += p.statements
		a.OwnStatements += p.ownStatements
		a.Servers = append(a.Servers, p.pids)
	}
	if !known {
		a.Statements, a.OwnStatements = -1, 0
	}
	return a, nil
}

type pgActivity struct {
	xacts, statements       int64
	ownXacts, ownStatements int64
	pids                    []int
}

// postgresActivity reads the counters of dsn's database in one connection
// and one statement, and one more when pg_stat_statements is installed in
// it. Its transactions are the connection's start (a backend reads the
// catalogs in one) and one per statement, in the simple protocol (the
// extended one adds a transaction for each statement it prepares).
func postgresActivity(ctx context.Context, dsn string) (pgActivity, error) {
	var p pgActivity
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return p, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return p, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = func() error {
		var (
			own   int32
			ext   bool
			procs []int32
		)
		err := conn.QueryRow(ctx, `SELECT pg_backend_pid(), xact_commit + xact_rollback,
			EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'),
			ARRAY(SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid())
			FROM pg_stat_database WHERE datname = current_database()`).Scan(&own, &p.xacts, &ext, &procs)
		if err != nil {
			return err
		}
		for _, pid := range procs {
			p.pids = append(p.pids, int(pid))
		}
		// The connection's transactions are flushed when it closes: later
		// readings count them.
		p.ownXacts, p.statements = 2, -1
		if !ext {
			return nil
		}
		p.ownXacts++ // committed or, if the library is not loaded, rolled back
		err = conn.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&p.statements)
		if err != nil {
			p.statements = -1 // installed, not loaded (shared_preload_libraries)
			return nil
		}
		// It counts the first statement, not itself; later readings count
		// both.
		p.statements--
		p.ownStatements = 2
		return nil
	}()
	return p, err
}

// mysqlDSN parses a MySQL DSN as `toc serve --sql` takes it:
// mysql://user:pass@host:port/db (or mariadb://), or the driver's form
// user:pass@tcp(host:port)/db with or without the scheme. isMySQL is false
// for another scheme.
func mysqlDSN(dsn string) (cfg *mysql.Config, isMySQL bool, err error) {
	rest, ok := strings.CutPrefix(dsn, "mysql://")
	if !ok {
		rest, ok = strings.CutPrefix(dsn, "mariadb://")
	}
	if !ok {
		if strings.Contains(dsn, "://") || (!strings.Contains(dsn, "@tcp(") && !strings.Contains(dsn, "@unix(")) {
			return nil, false, nil
		}
		rest = dsn
	}
	if strings.Contains(rest, "@tcp(") || strings.Contains(rest, "@unix(") || strings.HasPrefix(rest, "tcp(") {
		cfg, err := mysql.ParseDSN(rest)
		if err != nil {
			return nil, true, errors.New("malformed MySQL DSN")
		}
		return cfg, true, nil
	}
	u, err := url.Parse("mysql://" + rest)
	if err != nil || u.Host == "" {
		return nil, true, errors.New("malformed MySQL URL")
	}
	cfg = mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
	if u.Port() == "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	return cfg, true, nil
}

// mysqlActivity reads Com_commit + Com_rollback and Questions of the
// server's SHOW GLOBAL STATUS.
func mysqlActivity(ctx context.Context, cfg *mysql.Config) (xacts, questions int64, err error) {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return 0, 0, err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxOpenConns(1)
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_commit', 'Com_rollback', 'Questions')")
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	status := map[string]string{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return 0, 0, err
		}
		status[name] = value
	}
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	return parseMySQLStatus(status)
}

// parseMySQLStatus reads Com_commit + Com_rollback and Questions from the
// rows of SHOW GLOBAL STATUS.
func parseMySQLStatus(status map[string]string) (xacts, questions int64, err error) {
	var n [3]int64
	for i, name := range [3]string{"Com_commit", "Com_rollback", "Questions"} {
		v, ok := status[name]
		if !ok {
			return 0, 0, fmt.Errorf("no %s in SHOW GLOBAL STATUS", name)
		}
		if n[i], err = strconv.ParseInt(v, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", name, err)
		}
	}
	return n[0] + n[1], n[2], nil
}
