//go:build !linux

package main

// exitedAlready reports whether the child process pid has exited; where
// waitid is not used, it cannot tell, and says no (exec then reports a
// loss it learns together with the command's exit as a loss).
func exitedAlready(int) bool { return false }
