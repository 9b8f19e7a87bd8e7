package qlotel_test

import (
	"context"
	"log"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/quorumlock/quorumlock/otel"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// Example wires a Client to OpenTelemetry: the Observer for the locks'
// spans and metrics, a Hook per node for the Redis commands' spans. The
// providers stand for the program's own (with its exporters and
// resource); docs/observability.md shows the same code.
func Example() {
	tp := sdktrace.NewTracerProvider( /* sdktrace.WithBatcher(exporter), ... */ )
	mp := sdkmetric.NewMeterProvider( /* sdkmetric.WithReader(reader), ... */ )
	defer tp.Shutdown(context.Background())
	defer mp.Shutdown(context.Background())

	obs, err := qlotel.NewObserver(qlotel.WithTracerProvider(tp), qlotel.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	var pools []pool.Pool
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379"} {
		hook, err := qlotel.NewHook(addr, qlotel.WithTracerProvider(tp))
		if err != nil {
			log.Fatal(err)
		}
		p, err := pool.Dial(&redis.Options{Addr: addr}, pool.WithHooks(hook))
		if err != nil {
			log.Fatal(err)
		}
		defer p.Close()
		pools = append(pools, p)
	}
	client, err := redlock.New(pools, redlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// The caller's span (here a new one) is the parent of the lock's spans
	// and of its Redis commands'.
	ctx, span := tp.Tracer("example").Start(context.Background(), "nightly-report")
	defer span.End()
	err = client.Do(ctx, "reports/nightly", func(ctx context.Context) error {
		return nil // the critical section
	})
	if err != nil {
		log.Print(err)
	}
}
