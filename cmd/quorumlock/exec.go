package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

const execSynopsis = `usage: quorumlock exec [flags] KEY [--] COMMAND [ARGS...]

Acquire the lock KEY on a quorum of the Redis masters, waiting up to --wait,
then run COMMAND with these variables added to its environment:

  QUORUMLOCK_KEY    the lock's key
  QUORUMLOCK_TOKEN  the random token that marks this holder on the nodes
                    (with --metadata: then the byte 0x1d and the description)
  QUORUMLOCK_FENCE  the fencing token: greater than that of every earlier
                    holder of KEY while the masters keep their data (no
                    restart without persistence, no eviction: see
                    docs/safety.md); 0 with --fencing=false. Pass it to the
                    resource you change so it can refuse older holders

The lock is renewed every --ttl/3 while COMMAND runs and released when it
exits. If the lock is lost (renewals fail until its validity ends, or the
nodes say it has passed to someone else), COMMAND's process group gets
SIGTERM, and SIGKILL after --grace. COMMAND runs in a process group of its
own, the terminal's foreground when quorumlock has it; SIGINT, SIGTERM,
SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to quorumlock are passed on to
that group. SIGTSTP (Ctrl-Z) is ignored while COMMAND runs: a stopped
command would hold the lock for ever, a stopped quorumlock would let it
lapse while the command still works.

With --shared, COMMAND holds KEY with any number of other --shared holders
(readers), and with no holder of KEY alone; a holder of KEY alone waiting
for it holds new --shared holders back. Shared holders get no fencing token.

Examples:
  quorumlock exec --wait 5m --metadata "$(hostname)" nightly-report -- ./report.sh
  quorumlock exec --shared --wait 1m catalog -- ./read-catalog.sh
`

// execNodeTimeout is exec's default per-node timeout: above the library's,
// because a fresh process has no connection yet and must dial (and, with
// TLS, handshake with) every node within it.
const execNodeTimeout = 250 * time.Millisecond

// execCommand implements "quorumlock exec".
func execCommand(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet("exec", execSynopsis, exitCodes)
	var lf lockFlags
	lf.register(fs, "while COMMAND runs")
	lf.registerAcquire(fs)
	grace := fs.Duration("grace", 10*time.Second, "after the lock is lost, how long COMMAND has between SIGTERM and SIGKILL")
	shared := fs.Bool("shared", false, "hold KEY with other --shared holders (readers), not alone; no fencing token")
	if code, ok := parseFlags(e, fs, args); !ok {
		return code
	}
	switch left := fs.NArg(); {
	case left == 0:
		return usageError(e, "exec", errors.New("missing KEY and COMMAND: quorumlock exec KEY -- COMMAND [ARGS...]"))
	case left < len(args) && args[len(args)-left-1] == "--": // "exec -- COMMAND": what follows "--" is the command
		return usageError(e, "exec", fmt.Errorf("missing KEY before --: quorumlock exec KEY -- %s", strings.Join(fs.Args(), " ")))
	}
	key := fs.Arg(0)
	if key == "" {
		return usageError(e, "exec", errors.New("KEY is empty: name the lock"))
	}
	if code, ok := parseFlags(e, fs, fs.Args()[1:]); !ok { // flags may follow KEY
		return code
	}
	command := fs.Args()
	switch {
	case len(command) == 0:
		return usageError(e, "exec", fmt.Errorf("missing COMMAND: quorumlock exec %s -- COMMAND [ARGS...]", key))
	case *grace < 0:
		return usageError(e, "exec", fmt.Errorf("--grace %v is negative: use 0 to send SIGKILL at once", *grace))
	}
	var opts []redlock.Option
	if *shared {
		if flagSet(fs, "fencing") && lf.fencing {
			return usageError(e, "exec", errors.New("--shared with --fencing: shared holders get no fencing token (fences order the writers of a resource)"))
		}
		lf.fencing, opts = false, []redlock.Option{redlock.Shared()}
	}
	client, n, closeAll, err := lf.client(e, "exec", opts...) // redlock's warnings (failed renewals, the loss and why) go to stderr
	if err != nil {
		return usageError(e, "exec", err)
	}
	defer closeAll()
	l, code := acquire(ctx, e, "exec", client, key, &lf, n)
	if l == nil {
		return code
	}
	return runLocked(e, l, command, *grace)
}

// acquire takes the lock for command name (exec, hold), renewed, stopping
// early when a signal arrives. It returns the lock, or nil and the exit
// status.
func acquire(ctx context.Context, e *env, name string, client *redlock.Client, key string, lf *lockFlags, n int) (*redlock.Lock, int) {
	wait := lf.wait
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	quit, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case sig := <-e.signals:
			cancel(signalError{sig})
		case <-quit:
		}
	}()
	var (
		l   *redlock.Lock
		err error
	)
	switch {
	case wait == forever:
		l, err = client.Lock(ctx, key, redlock.WithAutoExtend(true))
	case wait > 0:
		l, err = client.Lock(ctx, key, redlock.WithAutoExtend(true), redlock.WithMaxWait(wait))
	default:
		l, err = client.TryLock(ctx, key, redlock.WithAutoExtend(true))
	}
	close(quit)
	<-watched
	var sig signalError
	if errors.As(context.Cause(ctx), &sig) {
		if l != nil {
			_ = l.Release(context.Background())
		}
		fmt.Fprintf(e.stderr, "quorumlock %s: %v while waiting for the lock %q; not acquired\n", name, sig, key)
		return nil, sig.status()
	}
	if err == nil {
		return l, 0
	}
	return nil, notAcquired(e, name, key, err, lf, n)
}

// notAcquired reports why the lock was not acquired (err), and returns the
// exit status.
func notAcquired(e *env, name, key string, err error, lf *lockFlags, n int) int {
	if !errors.Is(err, redlock.ErrNotAcquired) { // not the lock's state: the setup is wrong
		fmt.Fprintf(e.stderr, "quorumlock %s: %s\n", name, cliTerms(err))
		return exitUsage
	}
	qe, down := unreachable(err)
	switch {
	case errors.Is(err, redlock.ErrAuth):
		return reportRefused(e, name, err)
	case down:
		return reportUnavailable(e, name, answered(qe), n, qe.Quorum, failures(qe), true)
	}
	hint := "use --wait to wait for it"
	if lf.wait > 0 {
		hint = fmt.Sprintf("waited %v; use a longer --wait to wait longer", lf.wait)
	}
	fmt.Fprintf(e.stderr, "quorumlock %s: lock %q not acquired: another holder has it (%s)\n  %s\n", name, key, hint, cliTerms(err))
	return lf.conflict
}

// runLocked runs command while l is held, and releases l when it exits.
func runLocked(e *env, l *redlock.Lock, command []string, grace time.Duration) int {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	cmd.Env = append(withoutLockVars(e.environ),
		"QUORUMLOCK_KEY="+l.Key(),
		"QUORUMLOCK_TOKEN="+l.Token(),
		"QUORUMLOCK_FENCE="+strconv.FormatUint(l.Fence(), 10))
	restoreStop := ignoreStop()
	restoreTerminal := ownProcessGroup(cmd, e.stdin)
	err := cmd.Start()
	if err != nil {
		restoreTerminal()
		restoreStop()
		release(e, l, false)
		code := exitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		fmt.Fprintf(e.stderr, "quorumlock exec: cannot run %s: %v; the lock %q was released\n", command[0], err, l.Key())
		return code
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the status is in cmd.ProcessState
		close(exited)
	}()

	lostC := l.Done()
	var (
		lost bool
		kill <-chan time.Time
	)
loop:
	for {
		select {
		case sig := <-e.signals:
			_ = signalGroup(cmd.Process, sig)
		case <-lostC:
			lostC = nil
			if !errors.Is(l.Err(), redlock.ErrLockLost) {
				continue // released: cannot happen before the command exits
			}
			if exitedAlready(cmd.Process.Pid) { // quorumlock learns both at once (it was stalled): see lostAfter
				<-exited
				break loop
			}
			lost = true
			fmt.Fprintf(e.stderr, "quorumlock exec: lock %q lost while %s runs: sending it SIGTERM (SIGKILL in %v)\n", l.Key(), command[0], grace)
			_ = signalGroup(cmd.Process, sigTerm)
			t := time.NewTimer(grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			fmt.Fprintf(e.stderr, "quorumlock exec: %s still runs %v after SIGTERM: sending SIGKILL\n", command[0], grace)
			_ = signalGroup(cmd.Process, sigKill)
		case <-exited:
			break loop
		}
	}
	restoreTerminal()
	restoreStop()
	lostAfter := !lost && errors.Is(l.Err(), redlock.ErrLockLost)
	if lost || lostAfter {
		// What is left of the group works without the lock: stop it too.
		_ = signalGroup(cmd.Process, sigKill)
	}
	release(e, l, lost || lostAfter)
	switch {
	case lost:
		fmt.Fprintf(e.stderr, "quorumlock exec: %s was terminated because the lock %q was lost (exit status %d)\n", command[0], l.Key(), exitLost)
		return exitLost
	case lostAfter:
		// The command had exited when quorumlock learned of the loss:
		// quorumlock did not run for a while (stopped, or starved of
		// CPU), so it cannot tell whether the command finished inside
		// the lock's validity. Its own status is what the caller needs
		// to know whether the work was done.
		fmt.Fprintf(e.stderr, "quorumlock exec: %s exited with status %d; the lock %q was found lost only after the command had exited,\n"+
			"  because quorumlock itself did not run for a while: it cannot tell whether the command finished within the lock's validity (%v)\n",
			command[0], exitStatus(cmd.ProcessState), l.Key(), l.Err())
	}
	return exitStatus(cmd.ProcessState)
}

// release releases l after the command exited, and reports a release that
// no quorum confirmed (the lock then expires with its TTL).
func release(e *env, l *redlock.Lock, lost bool) {
	err := l.Release(context.Background())
	if err != nil && !lost {
		fmt.Fprintf(e.stderr, "quorumlock exec: releasing the lock %q: %s\n  It expires by itself within its TTL.\n", l.Key(), cliTerms(err))
	}
}

// withoutLockVars returns environ without the variables exec sets, so that
// a nested quorumlock exec does not pass its parent's on, and with the
// passwords taken out of QUORUMLOCK_ADDRS: the command gets the nodes, not
// the secret (a nested quorumlock reads it with --password-file).
func withoutLockVars(environ []string) []string {
	out := make([]string, 0, len(environ)+3)
	for _, kv := range environ {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "QUORUMLOCK_KEY", "QUORUMLOCK_TOKEN", "QUORUMLOCK_FENCE":
		case envAddrs:
			out = append(out, envAddrs+"="+withoutPasswords(kv[len(envAddrs)+1:]))
		default:
			out = append(out, kv)
		}
	}
	return out
}

// signalError is the cause of an acquisition stopped by a signal.
type signalError struct{ sig os.Signal }

func (s signalError) Error() string { return "got " + signalName(s.sig) }

// quiet drops go-redis' internal log lines.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// flagSet reports whether the flag name was given on fs's command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
