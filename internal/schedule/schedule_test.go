package schedule

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type job struct {
	Entry
	name string
}

// TestBatchesByDueTime: items run once each, when due, those due within
// the head's window together; a removed item never runs, a re-added one
// runs at its new time; the goroutine exits when nothing is scheduled, and
// nothing runs after Close.
func TestBatchesByDueTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var runs [][]string
		start := time.Now()
		s := New(Config[*job]{
			Now:    time.Now,
			Window: func(*job) time.Duration { return 10 * time.Millisecond },
			Run: func(batch []*job) {
				var names []string
				for _, j := range batch {
					names = append(names, j.name+"@"+time.Since(start).String())
				}
				mu.Lock()
				runs = append(runs, names)
				mu.Unlock()
			},
			Go: wg.Go,
		})
		a, b, c, d := &job{name: "a"}, &job{name: "b"}, &job{name: "c"}, &job{name: "d"}
		s.Add(a, start.Add(100*time.Millisecond))
		s.Add(b, start.Add(105*time.Millisecond)) // within a's window
		s.Add(c, start.Add(50*time.Millisecond))
		s.Add(c, start.Add(200*time.Millisecond)) // moved later
		s.Add(d, start.Add(150*time.Millisecond))
		s.Remove(d)
		time.Sleep(time.Second)
		wg.Wait() // the goroutine exited: nothing scheduled
		mu.Lock()
		got := runs
		mu.Unlock()
		if len(got) != 2 || len(got[0]) != 2 || got[0][0] != "a@100ms" || got[0][1] != "b@100ms" || len(got[1]) != 1 || got[1][0] != "c@200ms" {
			t.Fatalf("runs %v; want [[a@100ms b@100ms] [c@200ms]]", got)
		}
		s.Add(a, time.Now().Add(time.Millisecond))
		s.Close()
		if s.Add(b, time.Now()) {
			t.Fatal("Add after Close reported true")
		}
		time.Sleep(time.Second)
		wg.Wait()
		if len(runs) != 2 {
			t.Fatalf("a batch ran after Close: %v", runs)
		}
	})
}
