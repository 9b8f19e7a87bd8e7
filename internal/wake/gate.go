package wake

import (
	"context"
	"sync"
)

// Gates lets one acquisition round per key and Client run at a time. Rounds
// of one Client for one key that overlap would split the nodes' votes between
// them (node A says yes to one, node B to the other), so that often neither
// wins and both roll back; one after the other, the first takes the lock or
// learns it is taken and the second learns it is held. Uncontended keys cost
// a map entry and no allocation; a channel exists only while rounds wait.
// The zero Gates is ready; safe for concurrent use.
type Gates struct {
	mu    sync.Mutex
	refs  map[string]int           // the round in progress plus those waiting
	turns map[string]chan struct{} // capacity 1: the turn, handed to one waiter
}

// Enter waits for key's turn. It returns ctx's error, without the turn, when
// ctx ends first.
func (g *Gates) Enter(ctx context.Context, key string) error {
	g.mu.Lock()
	if g.refs == nil {
		g.refs, g.turns = map[string]int{}, map[string]chan struct{}{}
	}
	n := g.refs[key]
	g.refs[key] = n + 1
	if n == 0 {
		g.mu.Unlock()
		return nil
	}
	turn := g.turns[key]
	if turn == nil {
		turn = make(chan struct{}, 1)
		g.turns[key] = turn
	}
	g.mu.Unlock()
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-turn: // handed to us meanwhile: leave it to the next one
		g.leaveLocked(key, turn)
	default:
		g.refs[key]--
	}
	return ctx.Err()
}

// Exit ends the turn of a successful Enter and hands it to one waiter.
func (g *Gates) Exit(key string) {
	g.mu.Lock()
	g.leaveLocked(key, g.turns[key])
	g.mu.Unlock()
}

// leaveLocked gives up the turn: to the next waiter if there is one (the
// channel is then empty, so the send cannot block), else the key's entry
// goes. g.mu must be held.
func (g *Gates) leaveLocked(key string, turn chan struct{}) {
	n := g.refs[key] - 1
	if n == 0 {
		delete(g.refs, key)
		delete(g.turns, key)
		return
	}
	g.refs[key] = n
	turn <- struct{}{}
}
