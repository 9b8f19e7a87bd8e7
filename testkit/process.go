package testkit

import (
	"fmt"
	"path/filepath"

	"github.com/quorumlock/quorumlock/internal/redisproc"
)

// startProcesses runs n redis-server processes, each in its own directory
// under one temporary directory that Cluster.cleanup removes.
func (c *Cluster) startProcesses(bin string, n int, cfg config) error {
	c.backend = BackendProcess
	dir, err := redisproc.TempDir()
	if err != nil {
		return err
	}
	c.dir = dir
	args := redisArgs(cfg)
	return c.startNodes(n, func(i, port int) (server, error) {
		s, err := redisproc.New(bin, filepath.Join(dir, fmt.Sprintf("node%d-port%d", i, port)), port, args)
		if err != nil {
			return nil, err // not a nil *Server in a non-nil interface
		}
		return s, nil
	})
}
