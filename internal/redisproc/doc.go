// Package redisproc runs redis-server processes on 127.0.0.1 for tests:
// the process backend of the public test kit (module
// github.com/quorumlock/quorumlock/testkit), and the real servers of this
// module's own white-box tests, which cannot import the kit (its module
// requires this one). It depends on nothing but the standard library and
// go-redis, so this module's go.mod stays free of Docker. The servers run
// redis-server, or the binary $QUORUMLOCK_SERVER names (e.g. valkey-server).
//
// Everything here is meant for tests on Linux (Unix signals and /proc).
package redisproc
