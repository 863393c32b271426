// Package deptest checks that imports stay where they belong (STYLE.md 3,
// after tailscale's deptest and River's depguard): each driver is imported
// by its own package only, the engine depends on no driver, and task and
// client use the standard library only.
//
// The rules read the non-test imports of non-test packages, as `go list`
// reports them; tests may import what they need.
package deptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Packages that may import every driver, each for a stated reason. Paths are
// relative to the module and cover their subpackages.
var (
	// wiring assembles the program: it opens the backends and hands them
	// to the packages that use them.
	wiring = []string{"cmd", "internal/cli", "internal/server"}
	// testHelpers start and clean the services the tests use (testsvc),
	// or are tests only (e2e, which has no non-test files).
	testHelpers = []string{"internal/testsvc", "internal/e2e"}
)

// rule says which packages may not import what.
type rule struct {
	name string // what a failure cites
	// pkgs are the packages checked, with their subpackages; nil: every
	// package of the module.
	pkgs []string
	// deps checks every transitive dependency, not only direct imports.
	deps bool
	// forbid are import paths (and their subpackages) the packages may
	// not import.
	forbid []string
	// stdOnly forbids every import outside the standard library except
	// the packages of stdAllow.
	stdOnly  bool
	stdAllow []string
	// allow are packages exempt from the rule.
	allow []string
}

var (
	redisClient = []string{
		"github.com/redis/go-redis",
		"github.com/go-redis", // go-redis's old home: redis_rate, a limiter on go-redis
	}
	sqlDrivers  = []string{"github.com/jackc/pgx", "github.com/go-sql-driver/mysql"}
	amqpClient  = []string{"github.com/rabbitmq/amqp091-go"}
	natsClient  = []string{"github.com/nats-io/nats.go"}
	allDrivers  = concat(redisClient, sqlDrivers, amqpClient, natsClient)
	driverOwner = concat(wiring, testHelpers)
)

var rules = []rule{{
	name:   "the Redis client only in internal/store/redisindex and internal/cluster",
	forbid: redisClient,
	allow:  concat(driverOwner, []string{"internal/store/redisindex", "internal/cluster"}),
}, {
	name:   "the SQL drivers (pgx, mysql) only in internal/store/sqlstore",
	forbid: sqlDrivers,
	allow:  concat(driverOwner, []string{"internal/store/sqlstore"}),
}, {
	name:   "the AMQP client only in internal/sink/amqpsink",
	forbid: amqpClient,
	allow:  concat(driverOwner, []string{"internal/sink/amqpsink"}),
}, {
	name:   "the NATS client only in internal/sink/natssink",
	forbid: natsClient,
	allow:  concat(driverOwner, []string{"internal/sink/natssink"}),
}, {
	name:   "the engine depends on no driver, even through another package",
	pkgs:   []string{"internal/engine"},
	deps:   true,
	forbid: allDrivers,
}, {
	name:    "task uses the standard library only",
	pkgs:    []string{"task"},
	deps:    true,
	stdOnly: true,
}, {
	name:     "client uses task and the standard library only",
	pkgs:     []string{"client"},
	deps:     true,
	stdOnly:  true,
	stdAllow: []string{"task"},
}, {
	name:   "the cluster does not depend on the engine",
	pkgs:   []string{"internal/cluster"},
	deps:   true,
	forbid: []string{"internal/engine"},
	// Each declares the interface it needs of the other (engine.Index,
	// engine.Limiter, cluster.Engine); internal/server wires them.
}, {
	name:   "the product binary carries no benchmark suite (the bench module's: suite, baselines, store sizes); toc bench is internal/loadgen",
	pkgs:   []string{"cmd"},
	deps:   true,
	forbid: []string{"bench", "internal/bench"},
}}

// pkg is what go list says of a package.
type pkg struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Deps       []string
	Module     *struct {
		Path string
		Main bool
	}
}

func TestImports(t *testing.T) {
	mod, pkgs := list(t)
	// rel names a package of the module by its path in the module.
	rel := func(path string) string {
		if path == mod {
			return "."
		}
		return strings.TrimPrefix(path, mod+"/")
	}
	byPath := make(map[string]*pkg, len(pkgs))
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	for _, r := range rules {
		for _, p := range pkgs {
			if p.Module == nil || !p.Module.Main {
				continue
			}
			name := rel(p.ImportPath)
			if r.pkgs != nil && !under(name, r.pkgs...) || under(name, r.allow...) {
				continue
			}
			imports := p.Imports
			if r.deps {
				imports = p.Deps
			}
			for _, imp := range imports {
				if !r.forbids(rel(imp), byPath[imp]) {
					continue
				}
				verb := "imports"
				if r.deps {
					verb = "depends on"
				}
				t.Errorf("%s %s %s, breaking the rule: %s", name, verb, rel(imp), r.name)
			}
		}
	}
}

// forbids says whether r forbids importing imp (a path relative to the
// module when imp is in it), of which go list said p.
func (r *rule) forbids(imp string, p *pkg) bool {
	if r.stdOnly {
		return (p == nil || !p.Standard) && !under(imp, r.stdAllow...)
	}
	return under(imp, r.forbid...)
}

// under says whether path is one of prefixes or below one of them.
func under(path string, prefixes ...string) bool {
	for _, pre := range prefixes {
		if path == pre || strings.HasPrefix(path, pre+"/") {
			return true
		}
	}
	return false
}

// list returns the module's path, and its packages with their
// dependencies, from `go list -deps -json ./...` run at the module's root.
func list(t *testing.T) (mod string, pkgs []*pkg) {
	t.Helper()
	goMod := strings.TrimSpace(string(run(t, ".", "env", "GOMOD")))
	if goMod == "" || goMod == "/dev/null" {
		t.Fatal("go env GOMOD: not in a module")
	}
	root := filepath.Dir(goMod)
	mod = strings.TrimSpace(string(run(t, root, "list", "-m")))
	out := run(t, root, "list", "-deps", "-json=ImportPath,Standard,Imports,Deps,Module", "./...")
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(pkg)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list's output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list listed no packages")
	}
	return mod, pkgs
}

// run runs the go command in dir and returns its standard output.
func run(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

func concat(lists ...[]string) []string {
	var all []string
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}
