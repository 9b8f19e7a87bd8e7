package main

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestDemoNodeKilledMidCommand kills and revives a demo node again and again
// while clients send it the commands the demo's pools send (the restart
// guard's plain INFO among them). It failed under -race, and sometimes
// crashed, when a kill was miniredis' own Close: its INFO reads the server
// Close sets to nil. A revived node answers on its address with its data.
func TestDemoNodeKilledMidCommand(t *testing.T) {
	n, err := startDemoNode()
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	ctx := context.Background()
	redis.SetLogger(quiet{}) // as the demo does: every dial to a killed node fails
	client := func() *redis.Client {
		return redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1, DialTimeout: time.Second, DialerRetries: 1})
	}
	first := client()
	if err := first.Set(ctx, "kept", "yes", 0).Err(); err != nil {
		t.Fatal(err)
	}
	first.Close()
	for round := range 30 {
		// A client of its own each round: go-redis backs off after refused dials.
		c := client()
		var answered atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if c.Info(ctx).Err() == nil {
						answered.Add(1)
					}
				}
			})
		}
		for end := time.Now().Add(5 * time.Second); answered.Load() < 4 && time.Now().Before(end); {
			time.Sleep(100 * time.Microsecond)
		}
		if answered.Load() == 0 {
			t.Fatalf("round %d: no INFO was answered: the test did not reach the server", round)
		}
		n.kill() // with INFOs in flight
		close(stop)
		wg.Wait()
		c.Close()
		probe := client()
		if err := probe.Ping(ctx).Err(); err == nil {
			t.Error("a killed node answered PING")
		}
		probe.Close()
		if err := n.revive(); err != nil {
			t.Fatal(err)
		}
	}
	// A new client: c's pool may still be backing off from the refused dials.
	after := client()
	defer after.Close()
	if v, err := after.Get(ctx, "kept").Result(); err != nil || v != "yes" {
		t.Errorf("after the revivals: GET = %q, %v; want the value set before them", v, err)
	}
}
