package sqlstore

import (
	"fmt"

	"github.com/toc-dev/toc/task"
)

// MigrationStatements returns the statements of every migration of dialect
// ("postgres" or "mysql") for a database of tables tables.
func MigrationStatements(dialect string, tables int) ([]string, error) {
	d := postgresDialect
	if dialect == "mysql" {
		d = mysqlDialect
	}
	var out []string
	for _, m := range d.migrations {
		for i := range tables {
			q, err := d.ph.render(m.tmpl, tmplData{Table: tableName(i), Index: i})
			if err != nil {
				return nil, err
			}
			out = append(out, statements(q.sql)...)
		}
	}
	return out, nil
}

// Migrations returns the number of migrations of dialect ("postgres" or
// "mysql"): the rows of toc_schema_migrations of a database set up.
func Migrations(dialect string) int {
	if dialect == "mysql" {
		return len(mysqlDialect.migrations)
	}
	return len(postgresDialect.migrations)
}

// NoSyncReadSQL returns the get_for_update_no_sync query of id's table, or
// "" when the dialect has none.
func NoSyncReadSQL(s *Store, id task.ID) string {
	db, table, ok := s.route(id.Shard())
	if !ok || db.getForUpdateNoSync == nil {
		return ""
	}
	return db.getForUpdateNoSync[table].sql
}

// NoSyncManyReadSQL returns the get_many_for_update_no_sync query of rows
// ids of id's table, or "" when the dialect has none.
func NoSyncManyReadSQL(s *Store, id task.ID, rows int) (string, error) {
	db, table, ok := s.route(id.Shard())
	if !ok || s.dialect.queries["get_many_for_update_no_sync"] == nil {
		return "", nil
	}
	q, err := s.sizedQuery(db, "get_many_for_update_no_sync", table, rows)
	return q.sql, err
}

// UpdateTablesFencedSQL returns the update_many_fenced_tables query of
// id's database, or "" when the dialect has none.
func UpdateTablesFencedSQL(s *Store, id task.ID) string {
	db, _, ok := s.route(id.Shard())
	if !ok || db.updateTablesFenced == nil {
		return ""
	}
	return db.updateTablesFenced.sql
}

// OpenConns returns how many connections each database's pool holds.
func OpenConns(s *Store) []int {
	var n []int
	for _, db := range s.dbs {
		n = append(n, db.db.Stats().OpenConnections)
	}
	return n
}

// MySQLConfig is mysqlConfig: the driver's configuration of a MySQL DSN,
// before the store's own settings.
var MySQLConfig = mysqlConfig

// CreateInOneStatement reports whether Create would insert tasks, all of
// one database and with free keys, in one statement outside a transaction
// (createNew) rather than in a transaction of chunks.
func CreateInOneStatement(s *Store, tasks []*task.Task) (bool, error) {
	var ins []item
	var db *database
	for i, t := range tasks {
		d, table, _ := s.route(s.home(t.ID))
		if db != nil && d != db {
			return false, fmt.Errorf("task %d is in database %d, not %d", i, d.index, db.index)
		}
		db = d
		c := normalize(t.Clone())
		cols, err := columns(c)
		if err != nil {
			return false, err
		}
		ins = append(ins, item{i: i, t: c, table: table, cols: cols})
	}
	return db != nil && db.insertTablesNew != nil && fitsNew(ins), nil
}

// CopyMinRows is copyMinRows.
const CopyMinRows = copyMinRows

// CreateByCopy reports whether a create of n tasks of one database whose
// keys are free goes by COPY.
func CreateByCopy(s *Store, n int) bool { return s.byCopy(n) }
