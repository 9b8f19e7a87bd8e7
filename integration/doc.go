// Package integration tests package redlock against real Redis 7 servers
// started by internal/redistest (Docker containers, or local redis-server
// processes where no Docker daemon answers): every public operation, the
// failure modes of killed, paused and cut-off nodes, and the safety checks
// of the design brief (no overlapping holders, a lock-guarded counter that
// loses no update, nothing left behind by failed acquisitions).
//
// The package holds tests only; run them with
//
//	go test -race ./integration/
package integration
