// Package integration tests package redlock against real Redis 7 servers
// started by the test kit (module github.com/quorumlock/quorumlock/testkit:
// Docker containers, or local redis-server processes where no Docker daemon
// answers), whose history package also checks what the tests recorded: every public operation, the
// failure modes of killed, paused and cut-off nodes, and the safety checks
// of the design brief (no overlapping holders, a lock-guarded counter that
// loses no update, nothing left behind by failed acquisitions).
//
// The package holds tests only, in a module of its own (so that neither the
// library's users nor the kit's pull what only these tests need); run them
// from this directory with
//
//	go test -race .
package integration
