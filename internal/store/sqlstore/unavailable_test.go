package sqlstore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/toc-dev/toc/internal/store"
)

// TestMarkUnavailable: the errors of a lost connection or of a server
// shutting down or starting are marked store.ErrUnavailable (the engine
// writes an outcome again on them); a conflict, a constraint or a
// cancelled call is not.
func TestMarkUnavailable(t *testing.T) {
	for _, c := range []struct {
		d    *dialect
		err  error
		want bool
	}{
		{postgresDialect, &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, true},
		{postgresDialect, &pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, true},
		{postgresDialect, &pgconn.PgError{Code: "08006"}, true},
		{postgresDialect, fmt.Errorf("commit: %w", io.ErrUnexpectedEOF), true},
		{postgresDialect, fmt.Errorf("begin: %w", driver.ErrBadConn), true},
		{postgresDialect, fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{postgresDialect, &pgconn.PgError{Code: "40001"}, false},
		{postgresDialect, &pgconn.PgError{Code: "23505"}, false},
		{postgresDialect, context.Canceled, false},
		{postgresDialect, fmt.Errorf("read: %w", context.DeadlineExceeded), false},
		{mysqlDialect, &mysql.MySQLError{Number: 2013}, true},
		{mysqlDialect, &mysql.MySQLError{Number: 1053}, true},
		{mysqlDialect, mysql.ErrInvalidConn, true},
		{mysqlDialect, &mysql.MySQLError{Number: 1062}, false},
		{mysqlDialect, nil, false},
	} {
		got := c.d.markUnavailable(c.err)
		if is := errors.Is(got, store.ErrUnavailable); is != c.want {
			t.Errorf("%s: %v: unavailable %v, want %v", c.d.name, c.err, is, c.want)
		}
		if c.err != nil && !errors.Is(got, c.err) {
			t.Errorf("%s: %v: the error itself is lost: %v", c.d.name, c.err, got)
		}
	}
}
