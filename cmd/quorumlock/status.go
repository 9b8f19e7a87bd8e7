package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
)

const statusSynopsis = `usage: quorumlock status [flags] KEY

Show the lock KEY on every Redis master: whether the node answers, the token
that holds KEY there (its random part, as hold prints it and release takes
it), the holder's description (see exec --metadata), the remaining TTL, and
the key's fencing counter. The last
line says whether one token is on a quorum (the lock is held), on none (it
is free), or whether too few nodes answered to tell. Nothing is changed on
the nodes. With --json, the same as one JSON object.

Exit status: 0 held, 1 free, 2 bad usage, 5 too few nodes answered to tell.

Example:
  quorumlock status --json nightly-report | jq -r .holder
`

// status implements "quorumlock status" with redlock's Client.Inspect.
func status(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet("status", statusSynopsis, "")
	var nf nodeFlags
	nf.register(fs, time.Second, "how long each node may take to answer")
	asJSON := fs.Bool("json", false, "print the lock's state as one JSON object")
	pos, code, ok := parsePositional(e, fs, args, "KEY")
	if !ok {
		return code
	}
	if nf.nodeTimeout <= 0 {
		return usageError(e, "status", fmt.Errorf("--node-timeout %v: it must be positive", nf.nodeTimeout))
	}
	nodes, err := nf.nodes(e.getenv)
	if err != nil {
		return usageError(e, "status", err)
	}
	redis.SetLogger(quiet{})
	pools, err := dial(nodes)
	if err != nil {
		return usageError(e, "status", err)
	}
	defer closePools(pools)
	client, err := redlock.New(pools, redlock.WithNodeTimeout(nf.nodeTimeout), redlock.WithKeyPrefix(nf.prefix))
	if err != nil {
		return usageError(e, "status", flagNames(err))
	}
	defer client.Close()
	in, err := client.Inspect(ctx, pos[0])
	if in == nil { // the setup is wrong: two addresses reach one server
		fmt.Fprintf(e.stderr, "quorumlock status: %s\n", cliTerms(err))
		return exitUsage
	}
	if *asJSON {
		printJSON(e, in)
	} else {
		printInspection(e, in)
	}
	switch in.State {
	case redlock.StateHeld:
		return exitOK
	case redlock.StateFree:
		return exitFree
	}
	var failed []nodeFailure
	for _, n := range in.Nodes {
		if n.Err != nil {
			failed = append(failed, nodeFailure{n.Node, n.Err})
		}
	}
	return reportUnavailable(e, "status", in.Answered, len(in.Nodes), in.Quorum, failed, false)
}

// printInspection prints a table of the nodes and the summary line.
func printInspection(e *env, in *redlock.Inspection) {
	fmt.Fprintf(e.stdout, "lock %q (Redis key %s) on %d nodes, quorum %d\n\n", in.Key, in.RedisKey, len(in.Nodes), in.Quorum)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tREACHABLE\tHOLDER\tTTL\tFENCE\tMETADATA")
	for _, n := range in.Nodes {
		if n.Err != nil {
			fmt.Fprintf(tw, "%s\tno\t-\t-\t-\t-  %s\n", n.Node, cliTerms(n.Err))
			continue
		}
		holder, ttl, meta := nodeHolders(n)
		fence := "-"
		switch {
		case n.BadFence:
			fence = "not a counter"
		case n.Fence > 0:
			fence = strconv.FormatUint(n.Fence, 10)
		}
		fmt.Fprintf(tw, "%s\tyes\t%s\t%s\t%s\t%s\n", n.Node, holder, ttl, fence, meta)
	}
	_ = tw.Flush()
	fmt.Fprintln(e.stdout)
	switch {
	case in.State == redlock.StateHeld && in.Holder == "":
		fmt.Fprintf(e.stdout, "held shared: %s on a quorum (the most agreed: %d of %d nodes):", plural(len(in.Shared), "holder"), in.Agreed, len(in.Nodes))
		for _, h := range in.Shared {
			fmt.Fprintf(e.stdout, " %s", showToken(h.Token))
			if h.Metadata != "" {
				fmt.Fprintf(e.stdout, " (by %q)", h.Metadata)
			}
		}
		fmt.Fprintln(e.stdout)
	case in.State == redlock.StateHeld:
		fmt.Fprintf(e.stdout, "held: token %s on %d of %d nodes", showToken(in.Holder), in.Agreed, len(in.Nodes))
		if in.Metadata != "" {
			fmt.Fprintf(e.stdout, ", by %q", in.Metadata)
		}
		fmt.Fprintln(e.stdout)
	case in.State == redlock.StateFree:
		fmt.Fprintf(e.stdout, "free: no token is on a quorum of %d nodes\n", in.Quorum)
	default:
		fmt.Fprintf(e.stdout, "unknown: %d of %d nodes answered, too few to tell whether a token is on %d\n", in.Answered, len(in.Nodes), in.Quorum)
	}
}

// nodeHolders are the HOLDER, TTL and METADATA columns of node n: its
// holder, or its shared holders ("shared:" and their tokens), "-" when free.
func nodeHolders(n redlock.NodeInspection) (holder, ttl, meta string) {
	holder, ttl, meta = "-", "-", "-"
	if n.Token == "" && n.Shared == nil {
		return holder, ttl, meta
	}
	ttl = n.TTL.Round(time.Millisecond).String()
	if n.TTL == 0 {
		ttl = "?"
	}
	if n.Token != "" {
		holder = showToken(n.Token)
		if n.Metadata != "" {
			meta = strconv.Quote(n.Metadata)
		}
		return holder, ttl, meta
	}
	var tokens, metas []string
	for _, h := range n.Shared {
		tokens = append(tokens, showToken(h.Token))
		if h.Metadata != "" {
			metas = append(metas, strconv.Quote(h.Metadata))
		}
	}
	holder = "shared:" + strings.Join(tokens, ",")
	if metas != nil {
		meta = strings.Join(metas, ",")
	}
	return holder, ttl, meta
}

// statusJSON is status --json's output.
type statusJSON struct {
	Key      string           `json:"key"`
	RedisKey string           `json:"redis_key"`
	Quorum   int              `json:"quorum"`
	State    string           `json:"state"` // held, free or unknown
	Holder   string           `json:"holder,omitempty"`
	Metadata string           `json:"metadata,omitempty"`
	Shared   []holderJSON     `json:"shared,omitempty"` // shared holders on a quorum
	Agreed   int              `json:"agreed"`
	Answered int              `json:"answered"`
	Fence    uint64           `json:"fence"`
	Nodes    []nodeStatusJSON `json:"nodes"`
}

type nodeStatusJSON struct {
	Node      string       `json:"node"`
	Reachable bool         `json:"reachable"`
	Error     string       `json:"error,omitempty"`
	Holder    string       `json:"holder,omitempty"`
	Metadata  string       `json:"metadata,omitempty"`
	Shared    []holderJSON `json:"shared,omitempty"`
	TTLms     int64        `json:"ttl_ms,omitempty"`
	Fence     uint64       `json:"fence"`
	BadFence  bool         `json:"bad_fence,omitempty"`
}

// holderJSON is one shared holder.
type holderJSON struct {
	Token    string `json:"token"`
	Metadata string `json:"metadata,omitempty"`
}

func holdersJSON(hs []redlock.Holder) []holderJSON {
	var out []holderJSON
	for _, h := range hs {
		out = append(out, holderJSON{Token: h.Token, Metadata: h.Metadata})
	}
	return out
}

// printJSON prints in as one JSON object.
func printJSON(e *env, in *redlock.Inspection) {
	out := statusJSON{Key: in.Key, RedisKey: in.RedisKey, Quorum: in.Quorum, State: in.State.String(), Holder: in.Holder,
		Metadata: in.Metadata, Shared: holdersJSON(in.Shared), Agreed: in.Agreed, Answered: in.Answered, Fence: in.Fence}
	for _, n := range in.Nodes {
		j := nodeStatusJSON{Node: n.Node, Reachable: n.Err == nil, Holder: n.Token, Metadata: n.Metadata, Shared: holdersJSON(n.Shared),
			TTLms: n.TTL.Milliseconds(), Fence: n.Fence, BadFence: n.BadFence}
		if n.Err != nil {
			j.Error = n.Err.Error()
		}
		out.Nodes = append(out.Nodes, j)
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

// plural is n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
