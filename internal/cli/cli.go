// Package cli is toc's command line: one file per subcommand, each mapping
// its flags onto a [client.Client] call (or, for serve, onto the server).
// [Run] is all that main calls; only main touches signals and os.Exit.
package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/toc-dev/toc/client"
	"github.com/toc-dev/toc/internal/loadgen"
	"github.com/toc-dev/toc/internal/server"
	"github.com/toc-dev/toc/task"
)

// ErrUsage is wrapped by every error that comes from the command line
// itself (an unknown command, a missing or malformed flag) rather than from
// doing the work; main exits with status 2 for these.
var ErrUsage = server.ErrUsage

// usageError is a command-line mistake. Its text is the message alone.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
func (e *usageError) Unwrap() error { return ErrUsage }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// Environment variables read for flag defaults.
const (
	EnvServer = "TOC_SERVER" // default of --server
	EnvToken  = "TOC_TOKEN"  // default of --token
)

// env is what a command runs with.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

type command struct {
	name     string
	synopsis string // arguments, after "toc <name>"
	summary  string // one line for the command list
	run      func(ctx context.Context, e *env, args []string) error
}

func commands() []command {
	return []command{
		{"serve", "[flags]", "run the toc server", func(ctx context.Context, e *env, args []string) error {
			return runServe(ctx, args, e.stdout, e.stderr)
		}},
		{"schedule", "--app A [--key K] (--in D | --at T) (--url URL | --pull) [flags]", "schedule a task and print it", runSchedule},
		{"get", "(ID | --app A --key K) [flags]", "print a task", runGet},
		{"cancel", "(ID | --app A --key K) [flags]", "cancel a scheduled task", runCancel},
		{"list", "--app A --state S [--limit N] [--cursor C] [--all] [--json] [flags]", "list an app's tasks in one state", runList},
		{"retry", "ID [flags]", "schedule a dead or expired task again, now", runRetry},
		{"bulk", "(retry | cancel) --app A [--state S] [--key-prefix P] [--due-after T] [--due-before T] [--limit N] [--all] [flags]", "retry or cancel every task of an app that a filter matches", runBulk},
		{"schedules", "(create | get | list | pause | resume | delete | next) [flags]", "create and manage recurring schedules (cron or every)", runSchedules},
		{"backup", "--to DIR [flags]", "copy a running embedded server's store into DIR", runBackup},
		{"export", "[--app A] [--state S] [--data DIR] [flags] > tasks.ndjson", "write tasks as NDJSON, from a server or an embedded store", runExport},
		{"import", "[--from FILE] [flags] < tasks.ndjson", "re-create exported tasks on a server, keeping their ids", runImport},
		{"clock", "[advance (DURATION | --to TIME)] [flags]", "show the server's clock, or move a test clock forward", runClock},
		{"version", "", "print the version and revision toc was built from", runVersion},
		{"bench", "(--embedded | --server URL) [--workload fire|schedule|pending|twoapp|hot] [flags]", "benchmark a server: lateness, throughput, memory", func(ctx context.Context, e *env, args []string) error {
			return runBench(ctx, args, e.stdout, e.stderr, nil)
		}},
	}
}

// Run runs the toc command line: args are the arguments after the program
// name, like ["get", "01J..."]. Output goes to stdout, diagnostics and usage
// to stderr. Errors from the command line itself wrap [ErrUsage]. Asking for
// help (toc help, toc -h, toc <command> -h) prints it and returns nil.
//
// Flag defaults are read from the environment: $TOC_SERVER for --server and
// $TOC_TOKEN for --token.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if os.Getenv(loadgen.EnvGetProbe) == "1" {
		return RunGetProbe(ctx, os.Stdin, stdout)
	}
	return run(ctx, args, &env{stdout: stdout, stderr: stderr, getenv: os.Getenv})
}

// RunGetProbe is what toc's command does when [loadgen.EnvGetProbe] is set:
// a hot instant's GETs from a process of their own ([loadgen.GetProbe]),
// which `toc bench` starts. A test binary that runs a hot instant calls it
// from its TestMain.
func RunGetProbe(ctx context.Context, in io.Reader, out io.Writer) error {
	return loadgen.ServeGetProbe(ctx, in, out, func(server, token string) func(context.Context, task.ID) error {
		c := client.New(client.Config{BaseURL: server, Token: token})
		return func(ctx context.Context, id task.ID) error {
			_, err := c.Get(ctx, id)
			return err
		}
	})
}

func run(ctx context.Context, args []string, e *env) error {
	if len(args) == 0 {
		printUsage(e.stderr)
		return usagef("no command given")
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if name == "help" && len(rest) > 0 {
			cmd, ok := lookup(rest[0])
			if !ok {
				printUsage(e.stderr)
				return usagef("help: unknown command %q", rest[0])
			}
			// Asked for: the command's help goes to stdout.
			return cmd.run(ctx, &env{stdout: e.stdout, stderr: e.stdout, getenv: e.getenv}, []string{"-h"})
		}
		printUsage(e.stdout)
		return nil
	case "-version", "--version":
		return runVersion(ctx, e, rest)
	}
	cmd, ok := lookup(name)
	if !ok {
		printUsage(e.stderr)
		return usagef("unknown command %q", name)
	}
	return cmd.run(ctx, e, rest)
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `toc schedules tasks to fire at a time and tells you when they are due.

usage: toc <command> [flags] [arguments]

commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
Run "toc help <command>" for a command's flags. Every command but serve
takes --server (default $%s, else %s)
and --token (default $%s). Flags may also follow arguments.
`, EnvServer, client.BaseURLDefault, EnvToken)
}

// newFlagSet returns the flag set of one command, printing to e.stderr.
func newFlagSet(e *env, name, description string) *flag.FlagSet {
	fs := flag.NewFlagSet("toc "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	synopsis := ""
	if c, ok := lookup(name); ok {
		synopsis = c.synopsis
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: toc %s %s\n\n%s\n\nflags:\n", name, synopsis, strings.TrimSpace(description))
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args with fs and returns the positional arguments.
// Flags may come after positional arguments too ("get ID --server X"); a
// "--" ends the flags. On a flag error it prints the command's usage and
// returns a usage error; on -h it prints the usage and returns flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	// Parse quietly: the usage is printed once, below, and main prints the
	// error.
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	defer func() { fs.SetOutput(out); fs.Usage = usage }()

	var pos []string
	for {
		err := fs.Parse(args)
		if err != nil {
			fs.SetOutput(out)
			usage()
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%s: %v", strings.TrimPrefix(fs.Name(), "toc "), err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// helpOK turns the flag.ErrHelp of parseFlags into success: help was asked
// for and printed.
func helpOK(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// connFlags are the flags that say how to reach the server.
type connFlags struct {
	server, token string
}

func addConnFlags(fs *flag.FlagSet) *connFlags {
	c := new(connFlags)
	fs.StringVar(&c.server, "server", "", fmt.Sprintf("toc server `URL` (default $%s, else %s)", EnvServer, client.BaseURLDefault))
	// The default is not shown, so that usage never prints a token.
	fs.StringVar(&c.token, "token", "", fmt.Sprintf("bearer `token` sent to the server (default $%s)", EnvToken))
	return c
}

// client returns a client for the flags, or a usage error naming --server.
func (c *connFlags) client(e *env, cmd string) (*client.Client, error) {
	server, from := c.server, "--server"
	if server == "" {
		server, from = e.getenv(EnvServer), "$"+EnvServer
	}
	server = cmp.Or(server, client.BaseURLDefault)
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("%s: %s: want an http:// or https:// URL, got %q", cmd, from, server)
	}
	return client.New(client.Config{BaseURL: server, Token: cmp.Or(c.token, e.getenv(EnvToken))}), nil
}

// taskRef names a task by id, or by app and key.
type taskRef struct {
	id       task.ID
	app, key string
}

func (r taskRef) byKey() bool { return r.app != "" }

func (r taskRef) String() string {
	if r.byKey() {
		return fmt.Sprintf("app %s key %q", r.app, r.key)
	}
	return r.id.String()
}

// addRefFlags adds --app and --key, the other way to name a task.
func addRefFlags(fs *flag.FlagSet) (app, key *string) {
	app = fs.String("app", "", "`app` of the task, with --key, instead of an ID")
	key = fs.String("key", "", "`key` of the task, with --app, instead of an ID")
	return app, key
}

// resolveRef reads the task a command is about from its arguments.
func resolveRef(cmd string, pos []string, app, key string) (taskRef, error) {
	return resolveRefOf(cmd, "task", pos, app, key)
}

// resolveRefOf reads the object (noun: "task" or "schedule") a command is
// about from its arguments: an ID, or an app and a key.
func resolveRefOf(cmd, noun string, pos []string, app, key string) (taskRef, error) {
	switch {
	case len(pos) > 1:
		return taskRef{}, usagef("%s: want one %s ID, got %d arguments: %q", cmd, noun, len(pos), pos)
	case len(pos) == 1 && (app != "" || key != ""):
		return taskRef{}, usagef("%s: give a %s ID or --app and --key, not both", cmd, noun)
	case len(pos) == 1:
		id, err := task.ParseID(pos[0])
		if err != nil {
			return taskRef{}, usagef("%s: %q is not a %s ID (26 characters like 01JD8X5C2M0000ABCDEFGHJKMN)", cmd, pos[0], noun)
		}
		return taskRef{id: id}, nil
	case app == "" && key == "":
		return taskRef{}, usagef("%s: give a %s ID, or --app and --key", cmd, noun)
	case app == "":
		return taskRef{}, usagef("%s: --app is required with --key", cmd)
	case key == "":
		return taskRef{}, usagef("%s: --key is required with --app", cmd)
	}
	return taskRef{app: app, key: key}, nil
}

// noArgs fails when a command that takes only flags got arguments.
func noArgs(cmd string, pos []string) error {
	if len(pos) > 0 {
		return usagef("%s: unexpected argument %q", cmd, pos[0])
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
