package sqlstore

import (
	"bufio"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5/pgtype"
)

// The SQL of the store lives in .sql files (STYLE.md 15): the queries of a
// dialect in queries/<dialect>.sql, its migrations in
// migrations/<dialect>/NNNN_name.sql. All are text/templates, parsed when
// the package is initialized and rendered when a store is opened.
//
//go:embed queries/*.sql migrations/*/*.sql
var sqlFiles embed.FS

// tmplData is what a template is rendered with.
type tmplData struct {
	Table  string   // a task table: per-table queries and migrations
	Index  int      // the number of Table in its database
	Tables []string // every task table of a database: the UNION ALL queries
	Rows   int      // the rows of a multi-row statement (ids of a multi-row read)
}

// query is a rendered query: its text and the parameter each placeholder
// stands for, in order.
type query struct {
	sql    string
	params []string
}

// args returns the arguments of q, taking each parameter's value from p. A
// parameter missing from p is a bug in the store or its .sql files.
func (q query) args(p map[string]any) []any {
	out := make([]any, len(q.params))
	for i, name := range q.params {
		v, ok := p[name]
		if !ok {
			panic(fmt.Sprintf("sqlstore: no value for parameter %q of query %q", name, q.sql))
		}
		out[i] = v
	}
	return out
}

// placeholders says how a dialect writes parameters.
type placeholders struct {
	// numbered: $1, $2… with one number per name (PostgreSQL); otherwise a
	// "?" for every use (MySQL).
	numbered bool
}

// render executes t with data. Every {{arg "x"}} becomes a placeholder for
// parameter x, {{values n cols}} the VALUES list of n rows of cols columns,
// and {{rowarg r c}} the placeholder of row r, column c, for the rows a
// template lays out itself ({{range $r := .Rows}}). Arguments are passed
// row after row either way: a template must write row r's placeholders
// before row r+1's, and each row's in column order.
func (ph placeholders) render(t *template.Template, data tmplData) (query, error) {
	var q query
	number := map[string]int{}
	next := func(name string) string {
		if !ph.numbered {
			q.params = append(q.params, name)
			return "?"
		}
		if n, ok := number[name]; ok {
			return "$" + strconv.Itoa(n)
		}
		q.params = append(q.params, name)
		number[name] = len(q.params)
		return "$" + strconv.Itoa(len(q.params))
	}
	c, err := t.Clone()
	if err != nil {
		return q, err
	}
	c.Funcs(template.FuncMap{
		"arg":    next,
		"rowarg": func(r, col int) string { return next(rowParam(r, col)) },
		"colarg": func(col int) string { return next(colParam(col)) },
		"values": func(rows, cols int) string {
			var b strings.Builder
			for r := range rows {
				if r > 0 {
					b.WriteString(", ")
				}
				b.WriteByte('(')
				for col := range cols {
					if col > 0 {
						b.WriteString(", ")
					}
					b.WriteString(next(rowParam(r, col)))
				}
				b.WriteByte(')')
			}
			return b.String()
		},
	})
	var b strings.Builder
	if err := c.Execute(&b, data); err != nil {
		return q, fmt.Errorf("sqlstore: render %s: %w", t.Name(), err)
	}
	q.sql = strings.TrimSpace(b.String())
	return q, nil
}

// rowParam is the name {{values}} and {{rowarg}} give the parameter of row
// r, column c.
func rowParam(r, c int) string { return fmt.Sprintf("r%d.c%d", r, c) }

// colParam is the name {{colarg}} gives the parameter of column c: an array
// of every row's value (PostgreSQL's unnest and = ANY), so that the text of
// a multi-row statement, and the statement the driver prepares and caches
// for it, is one whatever the number of rows.
func colParam(c int) string { return "col" + strconv.Itoa(c) }

// bindRows returns the arguments of q, a multi-row statement, for rows
// (each row's values in column order): a {{rowarg}} or {{values}}
// parameter takes its row's value, a {{colarg}} one the column's values as
// an array (columnArray).
//
// The first array carries the size of them all (presized), so that the
// driver makes its buffer of the statement's parameters once, not by
// doubling it as it appends each value (a Create of 1000 tasks wrote its
// 0.4 MB of parameters into about 3.5 MB of buffers).
func (q query) bindRows(rows [][]any) ([]any, error) {
	out := make([]any, 0, len(q.params))
	first, size := -1, 0
	for _, name := range q.params {
		if c, ok := strings.CutPrefix(name, "col"); ok {
			n, err := strconv.Atoi(c)
			if err != nil {
				return nil, fmt.Errorf("sqlstore: parameter %q of a multi-row statement", name)
			}
			a, err := columnArray(rows, n)
			if err != nil {
				return nil, err
			}
			if first < 0 {
				first = len(out)
			}
			size += arrayBytes(a)
			out = append(out, a)
			continue
		}
		row, col, ok := parseRowParam(name)
		if !ok || row >= len(rows) || col >= len(rows[row]) {
			return nil, fmt.Errorf("sqlstore: parameter %q of a statement of %d rows", name, len(rows))
		}
		out = append(out, rows[row][col])
	}
	if first >= 0 {
		out[first] = presize(out[first], size)
	}
	return out, nil
}

// parseRowParam reads rowParam's name back.
func parseRowParam(name string) (row, col int, ok bool) {
	r, c, ok := strings.Cut(name, ".")
	r, ok1 := strings.CutPrefix(r, "r")
	c, ok2 := strings.CutPrefix(c, "c")
	row, err1 := strconv.Atoi(r)
	col, err2 := strconv.Atoi(c)
	return row, col, ok && ok1 && ok2 && err1 == nil && err2 == nil
}

// columnArray returns column c of rows as a typed slice the driver sends as
// an array: a FlatArray of []byte (a nil one is NULL), []string, or []int64
// ([]*int64 when a value is NULL).
func columnArray(rows [][]any, c int) (any, error) {
	var kind any // the first non-NULL value
	nulls := false
	for _, r := range rows {
		if r[c] == nil {
			nulls = true
		} else if kind == nil {
			kind = r[c]
		}
	}
	switch kind.(type) {
	case nil, []byte:
		// As a FlatArray: the driver sends a [][]byte by reflection.
		a, err := typedColumn[[]byte](rows, c, kind, true)
		return pgtype.FlatArray[[]byte](a), err
	case string:
		if !nulls {
			return typedColumn[string](rows, c, kind, false)
		}
	case int64:
		if !nulls {
			return typedColumn[int64](rows, c, kind, false)
		}
		vs, err := typedColumn[int64](rows, c, kind, true)
		if err != nil {
			return nil, err
		}
		a := make([]*int64, len(rows))
		for i, r := range rows {
			if r[c] != nil {
				a[i] = &vs[i]
			}
		}
		return a, nil
	}
	return nil, fmt.Errorf("sqlstore: column %d of a multi-row statement holds %T", c, kind)
}

// typedColumn is column c of rows as a []T, NULL (nil) its zero value when
// nulls are allowed; kind is the column's first non-NULL value, for the
// error.
func typedColumn[T any](rows [][]any, c int, kind any, nulls bool) ([]T, error) {
	a := make([]T, len(rows))
	for i, r := range rows {
		v, ok := r[c].(T)
		if !ok && (!nulls || r[c] != nil) {
			return nil, fmt.Errorf("sqlstore: column %d of a multi-row statement holds %T and %T", c, kind, r[c])
		}
		a[i] = v
	}
	return a, nil
}

// parseFuncs stand in for the functions render binds, at parse time.
var parseFuncs = template.FuncMap{
	"arg":    func(string) string { return "" },
	"values": func(int, int) string { return "" },
	"rowarg": func(int, int) string { return "" },
	"colarg": func(int) string { return "" },
}

// parseQueries reads a queries file: each "-- name: x" line starts query
// x, which runs to the next one. Other comment lines and blank lines are
// dropped.
func parseQueries(file string) (map[string]*template.Template, error) {
	b, err := sqlFiles.ReadFile(file)
	if err != nil {
		return nil, err
	}
	texts := map[string]*strings.Builder{}
	var order []string
	var cur *strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if name, ok := strings.CutPrefix(trimmed, "-- name:"); ok {
			name = strings.TrimSpace(name)
			if texts[name] != nil {
				return nil, fmt.Errorf("%s: query %q twice", file, name)
			}
			cur = new(strings.Builder)
			texts[name] = cur
			order = append(order, name)
			continue
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("%s: SQL before the first -- name: line", file)
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	out := make(map[string]*template.Template, len(texts))
	for _, name := range order {
		t, err := template.New(name).Funcs(parseFuncs).Option("missingkey=error").Parse(texts[name].String())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out[name] = t
	}
	return out, nil
}

// migration is one versioned schema change of a dialect.
type migration struct {
	version int
	name    string             // the file name
	tmpl    *template.Template // rendered once per task table
}

// parseMigrations reads the migrations of a dialect, in version order. Their
// files are named NNNN_what.sql, numbered from 1 without gaps.
func parseMigrations(dir string) ([]migration, error) {
	entries, err := fs.ReadDir(sqlFiles, dir)
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || !strings.HasSuffix(e.Name(), ".sql") {
			return nil, fmt.Errorf("%s: migration file %q is not named NNNN_what.sql", dir, e.Name())
		}
		b, err := sqlFiles.ReadFile(path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		t, err := template.New(e.Name()).Funcs(parseFuncs).Option("missingkey=error").Parse(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		out = append(out, migration{version: v, name: e.Name(), tmpl: t})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("%s: migration %d is missing", dir, i+1)
		}
	}
	return out, nil
}

// statements splits a rendered migration into statements: each ends with a
// ";" at the end of a line. Comment lines are dropped.
func statements(sql string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(sql) {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}
