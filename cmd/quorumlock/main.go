// Command quorumlock works with quorumlock's Redlock locks from the shell.
//
//	quorumlock demo [-duration 10s] [-workers 8]
//
// demo starts 5 Redis servers inside its own process, runs workers that
// contend for one lock while nodes are killed and revived, and prints what
// happened. It needs nothing installed but Go.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: quorumlock <command> [flags]

commands:
  demo    run contending workers against 5 embedded Redis servers while
          nodes are killed and revived, and print what happened

Run "quorumlock <command> -h" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

// run executes one command and returns the process exit status: 0 on
// success, 1 when the command failed, 2 on bad usage.
func run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	switch args[0] {
	case "demo":
		return demo(ctx, os.Stdout, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return 0
	}
	fmt.Fprintf(os.Stderr, "quorumlock: unknown command %q\n\n%s", args[0], usage)
	return 2
}
