module github.com/quorumlock/quorumlock/bench

go 1.26.0

replace github.com/quorumlock/quorumlock => ../

require (
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/quorumlock/quorumlock v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
	golang.org/x/image v0.47.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
)
