package sqlstore

import (
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgtype"
)

func TestRenderPlaceholders(t *testing.T) {
	tmpl := template.Must(template.New("q").Funcs(parseFuncs).Parse(
		`{{range $i, $t := .Tables}}{{if $i}} UNION ALL {{end}}(SELECT 1 FROM {{$t}} WHERE a = {{arg "a"}} AND b = {{arg "b"}}){{end}} LIMIT {{arg "a"}}`))
	data := tmplData{Tables: []string{"t0", "t1"}}
	for _, tt := range []struct {
		ph         placeholders
		wantSQL    string
		wantParams []string
	}{
		{placeholders{numbered: true},
			"(SELECT 1 FROM t0 WHERE a = $1 AND b = $2) UNION ALL (SELECT 1 FROM t1 WHERE a = $1 AND b = $2) LIMIT $1",
			[]string{"a", "b"}},
		{placeholders{},
			"(SELECT 1 FROM t0 WHERE a = ? AND b = ?) UNION ALL (SELECT 1 FROM t1 WHERE a = ? AND b = ?) LIMIT ?",
			[]string{"a", "b", "a", "b", "a"}},
	} {
		q, err := tt.ph.render(tmpl, data)
		if err != nil {
			t.Fatal(err)
		}
		if q.sql != tt.wantSQL {
			t.Errorf("numbered=%v: sql = %q, want %q", tt.ph.numbered, q.sql, tt.wantSQL)
		}
		if diff := cmp.Diff(tt.wantParams, q.params); diff != "" {
			t.Errorf("numbered=%v: params (-want +got):\n%s", tt.ph.numbered, diff)
		}
		got := q.args(map[string]any{"a": 1, "b": 2})
		if len(got) != len(tt.wantParams) || got[0] != 1 || got[1] != 2 {
			t.Errorf("numbered=%v: args = %v", tt.ph.numbered, got)
		}
	}
}

// TestRenderRowArg: {{rowarg}} names its parameters as {{values}} does, in
// the order the template writes them.
func TestRenderRowArg(t *testing.T) {
	tmpl := template.Must(template.New("q").Funcs(parseFuncs).Parse(
		`{{range $r := .Rows}}{{if $r}}, {{end}}({{rowarg $r 0}}::bytea, {{rowarg $r 1}}){{end}}`))
	q, err := placeholders{numbered: true}.render(tmpl, tmplData{Rows: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := "($1::bytea, $2), ($3::bytea, $4)"; q.sql != want {
		t.Errorf("sql = %q, want %q", q.sql, want)
	}
	want := []string{rowParam(0, 0), rowParam(0, 1), rowParam(1, 0), rowParam(1, 1)}
	if diff := cmp.Diff(want, q.params); diff != "" {
		t.Errorf("params (-want +got):\n%s", diff)
	}
	q, err = placeholders{}.render(tmpl, tmplData{Rows: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := "(?::bytea, ?), (?::bytea, ?)"; q.sql != want {
		t.Errorf("sql = %q, want %q", q.sql, want)
	}
	if diff := cmp.Diff(want, q.params); diff != "" {
		t.Errorf("params (-want +got):\n%s", diff)
	}
}

func TestRenderValues(t *testing.T) {
	tmpl := template.Must(template.New("q").Funcs(parseFuncs).Parse(`VALUES {{values .Rows 2}}`))
	q, err := placeholders{numbered: true}.render(tmpl, tmplData{Rows: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := "VALUES ($1, $2), ($3, $4)"; q.sql != want {
		t.Errorf("sql = %q, want %q", q.sql, want)
	}
	q, err = placeholders{}.render(tmpl, tmplData{Rows: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := "VALUES (?, ?), (?, ?)"; q.sql != want || len(q.params) != 4 || q.params[3] != rowParam(1, 1) {
		t.Errorf("sql = %q, params %q", q.sql, q.params)
	}
}

// TestQueriesRender renders every query of both dialects as a store does
// and checks their parameters are ones the store passes.
func TestQueriesRender(t *testing.T) {
	known := []string{
		"id", "app", "key", "state", "kind", "wake_at", "next_attempt_at", "finished_at", "record",
		"cutoff", "limit", "after_ms", "after_id", "until_ms", "now_ms", "timeout_s", "name", "value", "version",
	}
	tables := []string{tableName(0), tableName(1), tableName(2)}
	for _, d := range []*dialect{postgresDialect, mysqlDialect} {
		for name := range d.queries {
			q, err := d.render(name, tmplData{Table: tables[1], Index: 1, Tables: tables, Rows: 3})
			if err != nil {
				t.Errorf("%s %s: %v", d.name, name, err)
				continue
			}
			if strings.Contains(q.sql, "{{") || strings.Contains(q.sql, "<no value>") {
				t.Errorf("%s %s: unrendered: %s", d.name, name, q.sql)
			}
			for _, p := range q.params {
				if _, _, row := parseRowParam(p); !slices.Contains(known, p) && !row && !strings.HasPrefix(p, "col") {
					t.Errorf("%s %s: parameter %q the store never passes", d.name, name, p)
				}
			}
		}
		if len(d.migrations) == 0 {
			t.Errorf("%s: no migrations", d.name)
		}
	}
}

// TestPostgresMultiRowOneText: PostgreSQL's multi-row statements are one
// text whatever their rows (arrays), so the driver prepares each once.
func TestPostgresMultiRowOneText(t *testing.T) {
	for _, name := range []string{"insert", "get_many_for_update", "get_many_for_update_no_sync", "get_many_no_sync", "update_many", "update_many_fenced"} {
		one, err := postgresDialect.render(name, tmplData{Table: tableName(0), Rows: 1})
		if err != nil {
			t.Fatal(err)
		}
		many, err := postgresDialect.render(name, tmplData{Table: tableName(0), Rows: 100})
		if err != nil {
			t.Fatal(err)
		}
		if one.sql != many.sql {
			t.Errorf("%s of 1 row and of 100 differ:\n%s\n%s", name, one.sql, many.sql)
		}
	}
}

func TestBindRows(t *testing.T) {
	tmpl := template.Must(template.New("t").Funcs(parseFuncs).Parse(`SELECT {{colarg 0}}, {{colarg 1}}, {{colarg 2}}, {{colarg 3}}, {{arg "x"}}`))
	q, err := placeholders{numbered: true}.render(tmpl, tmplData{})
	if err != nil {
		t.Fatal(err)
	}
	rows := [][]any{{[]byte("a"), "s", int64(1), int64(5)}, {nil, "t", int64(2), nil}}
	got, err := query{sql: q.sql, params: q.params[:4]}.bindRows(rows)
	if err != nil {
		t.Fatal(err)
	}
	five := int64(5)
	// The first array carries the bytes of them all: 4 headers of 20,
	// 8 lengths of 4, and the values (1 + 2 + 16 + 16: a NULL integer
	// counts its 8 bytes, an upper bound is enough).
	want := []any{presized[[]byte]{pgtype.FlatArray[[]byte]{[]byte("a"), nil}, 4*20 + 8*4 + 1 + 2 + 16 + 16}, []string{"s", "t"}, []int64{1, 2}, []*int64{&five, nil}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(presized[[]byte]{})); diff != "" {
		t.Errorf("bindRows (-want +got):\n%s", diff)
	}
	if _, err := (query{params: []string{"col0"}}).bindRows([][]any{{"s"}, {[]byte("b")}}); err == nil {
		t.Error("bindRows of a column of a string and bytes: no error")
	}
}

func TestStatements(t *testing.T) {
	got := statements("-- a comment\nCREATE TABLE t (\n  a INT -- trailing\n);\n\n-- another\nCREATE INDEX i ON t (a);\nSELECT 1")
	want := []string{"CREATE TABLE t (\n  a INT -- trailing\n)", "CREATE INDEX i ON t (a)", "SELECT 1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("statements (-want +got):\n%s", diff)
	}
}
