package cli

import (
	"context"
	"fmt"
)

const cancelHelp = `
Cancels a scheduled task, named by its ID or by its app and key, and says
"cancelled" on stderr. A task being delivered or already finished cannot be
cancelled: the error says which state it is in.

Examples:
  toc cancel 01JD8X5C2M0000ABCDEFGHJKMN
  toc cancel --app billing --key order-42
`

func runCancel(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "cancel", cancelHelp)
	conn := addConnFlags(fs)
	app, key := addRefFlags(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return helpOK(err)
	}
	ref, err := resolveRef("cancel", pos, *app, *key)
	if err != nil {
		return err
	}
	c, err := conn.client(e, "cancel")
	if err != nil {
		return err
	}

	if ref.byKey() {
		err = c.CancelByKey(ctx, ref.app, ref.key)
	} else {
		err = c.Cancel(ctx, ref.id)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "cancelled %s\n", ref)
	return nil
}
