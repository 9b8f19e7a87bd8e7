//go:build unix && !linux

package main

import "errors"

// errNoTerminal: on this system exec leaves the terminal's foreground alone;
// the command runs in a background process group.
var errNoTerminal = errors.New("terminal foreground control is implemented on Linux only")

func tcgetpgrp(int) (int, error) { return 0, errNoTerminal }

func tcsetpgrp(int, int) error { return errNoTerminal }
