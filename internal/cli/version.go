package cli

import (
	"context"
	"fmt"
	"runtime/debug"
)

const versionHelp = `
Prints the toc module's version, the VCS revision it was built from (with
"+dirty" when the tree had uncommitted changes) and the Go version, from the
build information Go records in the binary. "toc --version" is the same.
`

func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "version", versionHelp)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return helpOK(err)
	}
	if err := noArgs("version", pos); err != nil {
		return err
	}
	_, err = fmt.Fprintln(e.stdout, versionLine(debug.ReadBuildInfo()))
	return err
}

// versionLine is one line naming the module version, the revision and the
// Go version of a binary's build information.
func versionLine(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return "toc (no build information: built without module support)"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	rev, modified, at := "", false, ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		case "vcs.time":
			at = s.Value
		}
	}
	line := "toc " + version
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if modified {
			rev += "+dirty"
		}
		line += " revision " + rev
		if at != "" {
			line += " (" + at + ")"
		}
	}
	return line + " " + bi.GoVersion
}
