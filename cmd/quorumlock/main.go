// Command quorumlock works with quorumlock's Redlock locks from the shell.
//
//	quorumlock exec [flags] KEY -- COMMAND [ARGS...]
//	quorumlock status [flags] KEY
//	quorumlock hold [flags] KEY
//	quorumlock release [flags] KEY TOKEN
//	quorumlock demo [flags]
//
// exec acquires the lock KEY on a quorum of Redis masters (waiting up to
// --wait), runs COMMAND with QUORUMLOCK_KEY, QUORUMLOCK_TOKEN and
// QUORUMLOCK_FENCE in its environment, keeps the lock renewed while it runs
// and releases it when it exits. If the lock is lost while the command runs,
// the command's process group gets SIGTERM, and SIGKILL after --grace.
// SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to quorumlock
// are passed on to the command's process group.
//
// status shows, for each node, whether it answers, the token that holds
// KEY there, the holder's description, its remaining TTL and the key's
// fencing counter (--json: as one JSON object).
//
// hold acquires KEY, prints its key, token and fence, keeps it renewed until
// a signal and then releases it; release releases KEY by the token hold or
// status printed, from any process. Every command prints a token in one
// form, its random part (without the --metadata description), which a
// shell passes on unquoted.
//
// demo starts 5 Redis servers inside its own process, runs workers that
// contend for one lock and increment a fenced counter while nodes are
// killed and revived, and prints progress every second and a summary. It
// needs nothing installed but Go.
//
// The nodes come from --addrs or, without it, QUORUMLOCK_ADDRS: a comma
// separated list of host:port, redis://[user:password@]host:port[/db] or
// rediss://... (TLS) URLs.
//
// # Exit status
//
// exec exits with the command's status (128+N when signal N killed it),
// unless quorumlock itself ends the run:
//
//	2      bad usage: unknown flag, missing KEY or COMMAND, no or malformed nodes
//	3      not acquired: another holder kept the lock for all of --wait
//	4      lock lost while the command ran; the command was terminated
//	5      lock service unavailable: too few nodes answered to reach a quorum
//	126    the command was found but could not be started
//	127    the command was not found
//	128+N  quorumlock got signal N while waiting for the lock
//
// A command can exit with 2 to 5 itself; for its own codes quorumlock always
// says why on standard error. status exits with 0 when the lock is held, 1
// when it is free and 5 when too few nodes answered to tell; hold with 0
// after a signal released the lock, 3 and 5 as exec, 4 when the lock was
// lost; release with 0 when it released the lock, 1 when the token does not
// hold it, 5 when too few nodes answered; demo with 0 when no update was lost and
// the fencing tokens strictly increased, 1 otherwise. Every command exits
// with 2 on bad usage and 0 after --help.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
)

// Exit statuses of quorumlock's own making (see the package doc).
const (
	exitOK          = 0
	exitFailed      = 1 // demo: an update was lost or holders overlapped
	exitFree        = 1 // status: the lock is free; release: TOKEN does not hold KEY
	exitUsage       = 2
	exitNotAcquired = 3
	exitLost        = 4
	exitUnavailable = 5
	exitCannotRun   = 126
	exitNotFound    = 127
)

const exitCodes = `Exit status:
  0..255  exec: the command's own status (128+N if a signal N killed it)
  1       status: the lock is free; release: the token does not hold the lock
  2       bad usage: unknown flag, missing KEY or COMMAND, no or malformed nodes
  3       not acquired: another holder kept the lock for all of --wait
  4       lock lost while the command ran; the command was terminated
  5       lock service unavailable: too few nodes answered to reach a quorum
  126     the command could not be started; 127: it was not found
  128+N   quorumlock got signal N while waiting for the lock
quorumlock explains each of its own codes on standard error.
`

const usage = `usage: quorumlock <command> [flags] [args]

commands:
  exec    run a command while holding a lock:  quorumlock exec KEY -- COMMAND [ARGS...]
  status  show a lock's state on every node:   quorumlock status KEY
  hold    take a lock and keep it until SIGINT or SIGTERM:  quorumlock hold KEY
  release release a lock by its token, from any process:  quorumlock release KEY TOKEN
  demo    contending workers on 5 embedded Redis servers while nodes are
          killed and revived (needs nothing but Go)

The nodes come from --addrs or QUORUMLOCK_ADDRS: comma separated host:port,
redis://[user:password@]host:port[/db] or rediss://... (TLS).
Run "quorumlock <command> --help" for a command's flags, "quorumlock --version"
for the version.

` + exitCodes

// env is what a command gets from its process: standard streams, the
// environment and the signals sent to it.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	environ        []string         // KEY=value, as os.Environ
	signals        <-chan os.Signal // signals to pass on (exec) or to stop at; nil: none
	guards         guardNotes       // the nodes said to be kept out by the restart guard
}

// getenv returns the value of name in e.environ ("" if absent).
func (e *env) getenv(name string) string {
	for _, kv := range slices.Backward(e.environ) {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

func main() { os.Exit(processMain()) }

// processMain runs the command named by the process' arguments, with its
// standard streams, environment and signals, and returns the exit status.
func processMain() int {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, relayed...)
	return run(context.Background(), &env{
		stdin:   os.Stdin,
		stdout:  os.Stdout,
		stderr:  os.Stderr,
		environ: os.Environ(),
		signals: sigs,
	}, os.Args[1:])
}

// run executes one command and returns the process exit status.
func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	if cmd == "help" && len(rest) > 0 { // quorumlock help exec
		cmd, rest = rest[0], []string{"--help"}
	}
	// exec and hold handle signals themselves; the others stop at one.
	stopped := map[string]func(context.Context, *env, []string) int{"status": status, "release": releaseCommand, "demo": demo}
	if f, ok := stopped[cmd]; ok {
		ctx, stop := stopOnSignal(ctx, e.signals)
		defer stop()
		return f(ctx, e, rest)
	}
	switch cmd {
	case "exec":
		return execCommand(ctx, e, rest)
	case "hold":
		return holdCommand(ctx, e, rest)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(e.stdout, usage)
		return exitOK
	case "--version", "-version", "version":
		fmt.Fprintln(e.stdout, version())
		return exitOK
	}
	fmt.Fprintf(e.stderr, "quorumlock: unknown command %q\n\n%s", cmd, usage)
	return exitUsage
}

// stopOnSignal returns a context that is cancelled when a signal arrives on
// sigs. stop ends the watch and waits for it.
func stopOnSignal(ctx context.Context, sigs <-chan os.Signal) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	if sigs == nil {
		return ctx, cancel
	}
	done := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-sigs:
			cancel()
		case <-quit:
		}
	}()
	return ctx, func() {
		close(quit)
		<-done
		cancel()
	}
}

// newFlagSet returns a flag set for a command whose help text is synopsis
// (printed before the flags) and footer (after them).
func newFlagSet(name, synopsis, footer string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parseFlags reports errors itself
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprint(w, synopsis)
		fmt.Fprintln(w, "\nflags (-flag and --flag are the same):")
		fs.PrintDefaults()
		if footer != "" {
			fmt.Fprint(w, "\n"+footer)
		}
	}
	return fs
}

// parseFlags parses args into fs. It returns ok false and the exit status
// when parsing ended the command: 0 after -h or --help (the help goes to
// stdout), 2 after an error (reported on stderr).
func parseFlags(e *env, fs *flag.FlagSet, args []string) (code int, ok bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(e.stdout)
		fs.Usage()
		fs.SetOutput(io.Discard)
		return exitOK, false
	}
	return usageError(e, fs.Name(), err), false
}

// usageError reports bad usage of command on e.stderr and returns exitUsage.
func usageError(e *env, command string, err error) int {
	fmt.Fprintf(e.stderr, "quorumlock %s: %v\nRun \"quorumlock %s --help\" for usage.\n", command, err, command)
	return exitUsage
}

// version is "quorumlock", the module version it was built from (or
// "(devel)"), the commit when the build recorded it, and the Go version.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "quorumlock (unknown version)"
	}
	v := "quorumlock " + bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v += " " + s.Value[:min(12, len(s.Value))]
		case "vcs.modified":
			if s.Value == "true" {
				v += "+modified"
			}
		}
	}
	return v + " " + bi.GoVersion
}

// parsePositional parses args into fs, flags before, between and after the
// positional arguments (all positional after "--"), and returns the
// positional ones, which must be exactly those named (the first is KEY: not
// empty). ok false: parsing ended the command with the exit status code.
func parsePositional(e *env, fs *flag.FlagSet, args []string, names ...string) (pos []string, code int, ok bool) {
	for rest := args; ; {
		if code, ok := parseFlags(e, fs, rest); !ok {
			return nil, code, false
		}
		left := fs.Args()
		if len(left) < len(rest) && rest[len(rest)-len(left)-1] == "--" {
			pos = append(pos, left...) // after "--": no more flags
			break
		}
		if len(left) == 0 {
			break
		}
		pos, rest = append(pos, left[0]), left[1:]
	}
	switch {
	case len(pos) < len(names):
		return nil, usageError(e, fs.Name(), fmt.Errorf("missing %s: quorumlock %s [flags] %s", names[len(pos)], fs.Name(), strings.Join(names, " "))), false
	case len(pos) > len(names):
		return nil, usageError(e, fs.Name(), fmt.Errorf("%d arguments %q, want %s", len(pos), pos, strings.Join(names, " "))), false
	case pos[0] == "":
		return nil, usageError(e, fs.Name(), errors.New("KEY is empty: name the lock")), false
	}
	return pos, 0, true
}
