package sim

import "sync"

// collected is what the clients of a schedule add up for a property the
// simulator judges itself; safe for concurrent use.
type collected[T any] struct {
	mu    sync.Mutex
	items []T
}

func (c *collected[T]) add(x T) {
	c.mu.Lock()
	c.items = append(c.items, x)
	c.mu.Unlock()
}

// all returns a copy of what was added.
func (c *collected[T]) all() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]T(nil), c.items...)
}
