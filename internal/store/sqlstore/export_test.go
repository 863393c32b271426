package sqlstore

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
