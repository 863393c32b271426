package cli

import (
	"context"

	"github.com/toc-dev/toc/task"
)

const getHelp = `
Prints a task as JSON, named by its ID or by its app and key.

Examples:
  toc get 01JD8X5C2M0000ABCDEFGHJKMN
  toc get --app billing --key order-42
`

func runGet(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "get", getHelp)
	conn := addConnFlags(fs)
	app, key := addRefFlags(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return helpOK(err)
	}
	ref, err := resolveRef("get", pos, *app, *key)
	if err != nil {
		return err
	}
	c, err := conn.client(e, "get")
	if err != nil {
		return err
	}

	var t *task.Task
	if ref.byKey() {
		t, err = c.GetByKey(ctx, ref.app, ref.key)
	} else {
		t, err = c.Get(ctx, ref.id)
	}
	if err != nil {
		return err
	}
	return printJSON(e.stdout, t)
}
