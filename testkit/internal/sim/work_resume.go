package sim

import (
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// rawResumePart is a client's part in a raw-resume schedule: s.ops times,
// it holds a key shared (four in ten), holds one alone as the mixed
// workload does (hold: released, or abandoned and resumed by its token),
// or resumes the value it reads raw from a random node (three in ten).
func (w *worker) rawResumePart() {
	ttl := w.s.ttl
	time.Sleep(w.upTo(ttl / 4))
	for range w.s.ops {
		switch x := w.r.IntN(10); {
		case x < 4:
			w.holdShared(w.key(), []time.Duration{0, ttl}[w.r.IntN(2)], w.between(ttl/2, 2*ttl))
		case x < 7:
			w.hold(w.key())
		default:
			w.resumeRaw(w.key())
		}
		time.Sleep(w.upTo(ttl / 4))
	}
}

// resumeRaw reads key's value raw from a random node, as a tool that reads
// Redis would, and resumes it (Client.Resume) when it is a value the nodes
// keep as a mark (a shared key's 0x1c and token, a handed key's 0x1e and
// waiter, a session lock's value with 0x1f: no lock's token, so Resume
// must fail; a success is a lock held alone beside the key's holders, S1)
// or the token of a lock it abandoned (its to take back, as a restarted
// process would). Any other token is left alone: another client's live
// lock is its holder's to hand over, and a token of its own that it
// released, or a failed round's, is the library's to remove (a release
// still on its way would take the lock from a handle resumed meanwhile).
func (w *worker) resumeRaw(key string) {
	n := w.nodes[w.r.IntN(len(w.nodes))]
	n.lock()
	v := n.st.live(redisKey(key), n.now())
	n.unlock()
	if v == nil || v.zset != nil {
		return
	}
	raw := v.str
	if !isMark(raw) && !w.abandoned[raw] {
		w.trace("%s read %q on %s: not a lock it abandoned, not resumed", w.name, short(raw), n.name)
		return
	}
	l, _, err := w.rec.Resume(w.ctx, key, raw, 0)
	w.trace("%s resume %q raw value %q read on %s: %v", w.name, key, short(raw), n.name, errOf(err))
	if l == nil {
		w.resumeFailed++
		return
	}
	w.resumed++
	w.section(l)
	w.release(l)
}

// redisKey is key's lock key on the nodes (redlock's: the prefix and the
// key as a hash tag).
func redisKey(key string) string { return redlock.DefaultKeyPrefix + "{" + key + "}" }

// isMark reports whether v, a lock key's value, is a mark the nodes keep
// (a shared key's, a handed key's, a session lock's), not a lock's token.
func isMark(v string) bool {
	return v != "" && (v[0] == 0x1c || v[0] == 0x1e || strings.IndexByte(v, 0x1f) >= 0)
}
