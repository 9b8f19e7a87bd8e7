package qlotel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Hook is a go-redis hook (redis.Hook) that makes a client span per command
// and per pipeline, a child of the span in the command's context. Add it
// to the client of one Redis master: pool.WithHooks for pool.Dial and
// pool.DialURL, or AddHook on a client you own. Lock commands reach it with
// the values of the call that sent them, so their spans are children of
// the caller's span; by default, commands whose context carries no span
// (renewals and other work the Client does on its own) make none
// (WithRootSpans). Spans carry db.system.name (and the older db.system)
// "redis", db.operation.name, server.address and server.port, never a
// command's arguments (a lock's token releases it). A failed command
// (other than redis.Nil) marks its span with status Error and error.type.
// Safe for concurrent use.
type Hook struct {
	tracer trace.Tracer
	root   bool
	learn  bool                                 // NewHook was given no address: each dial tells it
	server atomic.Pointer[[]attribute.KeyValue] // set by NewHook or by the latest dial
}

var _ redis.Hook = (*Hook)(nil)

// NewHook returns a Hook for the Redis server at addr ("host:port"); with
// addr "", the address is the remote address of the connection the client
// dialed last, so that the spans of a Sentinel-managed master
// (pool.DialFailover) name the master it reached, after a failover too. It
// fails only on a bad option; WithTracerProvider and WithRootSpans apply.
func NewHook(addr string, opts ...Option) (*Hook, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	h := &Hook{tracer: cfg.tracers.Tracer(ScopeName, trace.WithSchemaURL(schemaURL)), root: cfg.rootSpans, learn: addr == ""}
	if addr != "" {
		h.server.Store(serverAttrs(addr))
	}
	return h, nil
}

// serverAttrs are the attributes every span of the server at addr has.
func serverAttrs(addr string) *[]attribute.KeyValue {
	kv := []attribute.KeyValue{semconv.DBSystemNameRedis, attribute.String("db.system", "redis")}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		kv = append(kv, semconv.ServerAddress(addr))
		return &kv
	}
	kv = append(kv, semconv.ServerAddress(host))
	if p, err := strconv.Atoi(port); err == nil {
		kv = append(kv, semconv.ServerPort(p))
	}
	return &kv
}

// DialHook learns the server's address from each connection dialed when
// NewHook was given none: the connection's remote address, not the address
// asked for, which a Sentinel client gives as "FailoverClient". It makes no
// span.
func (h *Hook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err == nil && h.learn {
			if ra := conn.RemoteAddr(); ra != nil && ra.String() != "" {
				addr = ra.String()
			}
			h.server.Store(serverAttrs(addr))
		}
		return conn, err
	}
}

// ProcessHook makes a span named after the command (EVALSHA, GET, ...).
func (h *Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.root && !trace.SpanContextFromContext(ctx).IsValid() {
			return next(ctx, cmd)
		}
		name := upper(cmd.Name())
		ctx, span, known := h.start(ctx, name, semconv.DBOperationName(name))
		err := next(ctx, cmd)
		h.end(span, known, err, 0)
		return err
	}
}

// ProcessPipelineHook makes a span for a pipeline, named "BATCH" and the
// command when all its commands are one, else "BATCH", with
// db.operation.batch.size; its status is Error when a command failed.
func (h *Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.root && !trace.SpanContextFromContext(ctx).IsValid() {
			return next(ctx, cmds)
		}
		name := batchName(cmds)
		ctx, span, known := h.start(ctx, name, semconv.DBOperationName(name), semconv.DBOperationBatchSize(len(cmds)))
		err := next(ctx, cmds)
		failed := 0
		for _, c := range cmds {
			if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) {
				failed++
				if err == nil {
					err = e
				}
			}
		}
		h.end(span, known, err, failed)
		return err
	}
}

// start starts a command's span; known reports whether it has the
// server's attributes (else end adds them, once a dial has told them).
func (h *Hook) start(ctx context.Context, name string, kv ...attribute.KeyValue) (_ context.Context, _ trace.Span, known bool) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(kv...)}
	if s := h.server.Load(); s != nil {
		opts = append(opts, trace.WithAttributes(*s...))
		known = true
	}
	ctx, span := h.tracer.Start(ctx, name, opts...)
	return ctx, span, known
}

// end ends span, marking err unless it is redis.Nil; failed is the number
// of a pipeline's commands that failed.
func (h *Hook) end(span trace.Span, known bool, err error, failed int) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if s := h.server.Load(); !known && s != nil {
		span.SetAttributes(*s...)
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
		if failed > 0 {
			span.SetAttributes(attribute.Int("quorumlock.failed_commands", failed))
		}
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// errorType is err's error.type: a Redis error reply's prefix (NOSCRIPT,
// READONLY, ...), "timeout", "canceled", or the error's Go type.
func errorType(err error) string {
	var re redis.Error
	var ne net.Error
	switch {
	case errors.As(err, &re):
		s := re.Error()
		if i := strings.IndexByte(s, ' '); i > 0 {
			s = s[:i]
		}
		return s
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return "net." + oe.Op // net.dial, net.read, net.write
	}
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			return fmt.Sprintf("%T", err)
		}
		err = inner
	}
}

// commandNames are the upper-case names of the commands lock operations
// send, so that their spans need no allocation for the name.
var commandNames = map[string]string{}

func init() {
	for _, n := range []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "get", "set", "del", "pexpire", "pttl", "info", "ping", "hello", "client", "script", "subscribe", "unsubscribe", "publish", "select", "auth", "time", "multi", "exec"} {
		commandNames[n] = strings.ToUpper(n)
	}
}

func upper(name string) string {
	if u, ok := commandNames[name]; ok {
		return u
	}
	return strings.ToUpper(name)
}

// batchName names a pipeline of cmds: "BATCH EVALSHA" when all are EVALSHA.
func batchName(cmds []redis.Cmder) string {
	if len(cmds) == 0 {
		return "BATCH"
	}
	first := cmds[0].Name()
	for _, c := range cmds[1:] {
		if c.Name() != first {
			return "BATCH"
		}
	}
	return "BATCH " + upper(first)
}
