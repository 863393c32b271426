// Command toc is the toc timer service: its server (toc serve) and a command
// line client for its HTTP API. Run "toc help" for the commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/toc-dev/toc/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err == nil {
		return
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "toc: ") { // the client's errors say it already
		msg = "toc: " + msg
	}
	fmt.Fprintln(os.Stderr, msg)
	if errors.Is(err, cli.ErrUsage) {
		os.Exit(2)
	}
	os.Exit(1)
}
