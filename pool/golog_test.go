package pool

import (
	"context"
	"log"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/golog"
	"github.com/quorumlock/quorumlock/internal/testlog"
)

// TestGoRedisQuietForPools: a Pool whose node is down does not make
// go-redis log a line per failed dial (it logged "failed to dial after 1
// attempts" for every command, ~60 lines in a 2 s Do); a go-redis client of
// the program's own still does, through the logger the package installed.
func TestGoRedisQuietForPools(t *testing.T) {
	var out testlog.Buffer
	prev := golog.Out.Swap(log.New(&out, "redis: ", log.LstdFlags))
	defer golog.Out.Store(prev)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now: every dial is refused
	p, err := Dial(&redis.Options{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 5 {
		if r := send(t, p, "k"); r.Err == nil {
			t.Fatalf("GET on a node that is down: %+v; want an error", r)
		}
	}
	if st, _ := Stats(p); st.DialErrors == 0 {
		t.Fatalf("Stats %+v: no failed dial counted", st)
	}
	if s := out.String(); strings.Contains(s, "failed to dial") {
		t.Fatalf("go-redis logged the Pool's failed dials:\n%s", s)
	}
	own := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer own.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := own.Ping(ctx).Err(); err == nil {
		t.Fatal("PING on a node that is down succeeded")
	}
	if s := out.String(); !strings.Contains(s, "redis: ") || !strings.Contains(s, "failed to dial") {
		t.Fatalf("go-redis did not log the program's own client's failed dial: %q", s)
	}
}
