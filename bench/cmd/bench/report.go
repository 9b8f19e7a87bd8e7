package main

import (
	"fmt"
	"strings"
	"time"
)

type report struct {
	passes int
	dur    time.Duration
	scs    []scenario
	impls  []string
	meds   map[string]map[string]result // scenario id → impl → medians
	env    string
}

const oursName, base = "quorumlock", "redsync"

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/1e6) }

func ratio(a, b float64) string {
	if b == 0 || a == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func (rp *report) get(id, impl string) (result, bool) {
	r, ok := rp.meds[id][impl]
	return r, ok
}

// implsIn lists the implementations that ran in scenario id.
func (rp *report) implsIn(id string) []string {
	var ims []string
	for _, im := range rp.impls {
		if _, ok := rp.get(id, im); ok {
			ims = append(ims, im)
		}
	}
	return ims
}

// markdown renders the targets, then one table per scenario.
func (rp *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Medians of %d interleaved pass(es), %v measured per run.\n\n", rp.passes, rp.dur)
	b.WriteString(rp.env)
	b.WriteString("\n")
	b.WriteString(rp.targets())
	for _, sc := range rp.scs {
		fmt.Fprintf(&b, "\n#### %s (`%s`)\n\n", sc.title, sc.id)
		b.WriteString("| metric |")
		ims := rp.implsIn(sc.id)
		for _, im := range ims {
			fmt.Fprintf(&b, " %s |", im)
		}
		has := func(n string) bool { _, ok := rp.get(sc.id, n); return ok }
		// The floor is no lock: a ratio of its figures to redsync's says
		// nothing (the total CPU target compares ours to it).
		rated := func(im string) bool { return im != base && !isFloor(im) && has(base) }
		for _, im := range ims {
			if rated(im) {
				fmt.Fprintf(&b, " %s ÷ redsync |", im)
			}
		}
		b.WriteString("\n|---|")
		for range ims {
			b.WriteString("---:|")
		}
		for _, im := range ims {
			if rated(im) {
				b.WriteString("---:|")
			}
		}
		b.WriteString("\n")
		row := func(name string, val func(result) float64, format func(result) string) {
			if name == "hand-off p50 (ms)" || name == "hand-off p99 (ms)" {
				if sc.mode != blockOne {
					return
				}
			}
			fmt.Fprintf(&b, "| %s |", name)
			for _, im := range ims {
				r, _ := rp.get(sc.id, im)
				if isFloor(im) && strings.HasPrefix(name, "acquire") {
					b.WriteString(" n/a |") // no lock to acquire
					continue
				}
				fmt.Fprintf(&b, " %s |", format(r))
			}
			br, _ := rp.get(sc.id, base)
			for _, im := range ims {
				if rated(im) {
					r, _ := rp.get(sc.id, im)
					fmt.Fprintf(&b, " %s |", ratio(val(r), val(br)))
				}
			}
			b.WriteString("\n")
		}
		f0 := func(f func(result) float64) func(result) string {
			return func(r result) string { return fmt.Sprintf("%.0f", f(r)) }
		}
		dur := func(f func(result) time.Duration) (func(result) float64, func(result) string) {
			return func(r result) float64 { return float64(f(r)) }, func(r result) string { return ms(f(r)) }
		}
		tput := func(r result) float64 { return r.tput }
		row("throughput (cycles/s)", tput, f0(tput))
		v, s := dur(func(r result) time.Duration { return r.cycleP50 })
		row("cycle p50 (ms)", v, s)
		v, s = dur(func(r result) time.Duration { return r.cycleP99 })
		row("cycle p99 (ms)", v, s)
		v, s = dur(func(r result) time.Duration { return r.acqP50 })
		row("acquire p50 (ms)", v, s)
		v, s = dur(func(r result) time.Duration { return r.acqP99 })
		row("acquire p99 (ms)", v, s)
		v, s = dur(func(r result) time.Duration { return r.handP50 })
		row("hand-off p50 (ms)", v, s)
		v, s = dur(func(r result) time.Duration { return r.handP99 })
		row("hand-off p99 (ms)", v, s)
		al := func(r result) float64 { return r.allocs }
		row("allocations per cycle", al, f0(al))
		by := func(r result) float64 { return r.bytes }
		row("bytes per cycle", by, f0(by))
		cpu := func(r result) float64 { return float64(r.cpu) / 1e3 }
		row("client CPU per cycle (µs)", cpu, f0(cpu))
		srv := func(r result) float64 { return float64(r.srvCPU) / 1e3 }
		row("servers' CPU per cycle (µs, 5 redis-server)", srv, f0(srv))
		reads := func(r result) float64 { return r.srvReads }
		row("servers' reads per cycle (5 redis-server)", reads, func(r result) string { return fmt.Sprintf("%.2f", r.srvReads) })
		total := func(r result) float64 { return float64(r.cpu+r.srvCPU) / 1e3 }
		row("total CPU per cycle (µs, client + servers)", total, f0(total))
		fails := func(r result) float64 { return float64(r.failures) }
		row("failed attempts", fails, f0(fails))
		g := func(r result) float64 { return float64(r.goroutines) }
		row("goroutines (most, above baseline)", g, f0(g))
		left := func(r result) float64 { return float64(r.leftover) }
		row("goroutines left after close", left, f0(left))
	}
	return b.String()
}

// targets checks issue 7's targets against the medians.
func (rp *report) targets() string {
	var b strings.Builder
	b.WriteString("| target | measured | met |\n|---|---:|:---:|\n")
	line := func(name string, got string, ok bool, known bool) {
		mark := "no"
		if !known {
			mark, got = "–", "not run"
		} else if ok {
			mark = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, got, mark)
	}
	tp := func(id string, want float64) {
		o, ok1 := rp.get(id, oursName)
		r, ok2 := rp.get(id, base)
		x := o.tput / r.tput
		title := id
		for _, sc := range rp.scs {
			if sc.id == id {
				title = sc.title
			}
		}
		line(fmt.Sprintf("throughput, %s ≥ %.1f× redsync", title, want), fmt.Sprintf("%.2f×", x), x >= want, ok1 && ok2 && r.tput > 0)
	}
	tp("w1", 1.3)
	tp("w16", 2)
	tp("try1", 2)
	s, ok1 := rp.get("slow", oursName)
	f, ok2 := rp.get("w16", oursName)
	x := float64(s.acqP50) / float64(f.acqP50)
	line("acquire p50 with one node 2 ms slower ≤ 1.5× our own without", fmt.Sprintf("%.2f× (%s ms vs %s ms)", x, ms(s.acqP50), ms(f.acqP50)), x <= 1.5, ok1 && ok2 && f.acqP50 > 0)
	o, ok1 := rp.get("block1", oursName)
	r, ok2 := rp.get("block1", base)
	x = float64(o.handP50) / float64(r.handP50)
	line("blocking hand-off p50 ≤ 1/20 of redsync's", fmt.Sprintf("1/%.0f (%s ms vs %s ms)", 1/x, ms(o.handP50), ms(r.handP50)), x <= 1.0/20, ok1 && ok2 && r.handP50 > 0)
	for _, sc := range rp.scs {
		if sc.mode != distinct {
			continue
		}
		o, ok1 := rp.get(sc.id, oursName)
		r, ok2 := rp.get(sc.id, base)
		x := o.allocs / r.allocs
		line(fmt.Sprintf("allocations per cycle ≤ 0.6× redsync (%s)", sc.id), fmt.Sprintf("%.2f× (%.0f vs %.0f)", x, o.allocs, r.allocs), x <= 0.6, ok1 && ok2 && r.allocs > 0)
	}
	o, ok1 = rp.get(floorScenario, oursName)
	fl, ok2 := rp.get(floorScenario, floorName)
	r, _ = rp.get(floorScenario, base)
	us := func(r result) string {
		return fmt.Sprintf("%.0f µs (%.0f client + %.0f servers)", float64(r.cpu+r.srvCPU)/1e3, float64(r.cpu)/1e3, float64(r.srvCPU)/1e3)
	}
	x = float64(o.cpu+o.srvCPU) / float64(fl.cpu+fl.srvCPU)
	scripts := ""
	if sf, ok := rp.get(floorScenario, scriptFloorName); ok && sf.cpu+sf.srvCPU > 0 {
		scripts = fmt.Sprintf("; script floor %s, %.2f× the floor, quorumlock %.2f× it", us(sf),
			float64(sf.cpu+sf.srvCPU)/float64(fl.cpu+fl.srvCPU), float64(o.cpu+o.srvCPU)/float64(sf.cpu+sf.srvCPU))
	}
	line("total CPU per w16 cycle ≤ 1.6× the pipelined go-redis floor", fmt.Sprintf("%.2f× (%s vs floor %s%s; redsync %s)", x, us(o), us(fl), scripts, us(r)),
		x <= 1.6, ok1 && ok2 && fl.cpu+fl.srvCPU > 0)
	worst, most, known := 0, 0, false
	for _, sc := range rp.scs {
		if o, ok := rp.get(sc.id, oursName); ok {
			worst, most, known = max(worst, o.leftover), max(most, o.goroutines), true
		}
	}
	line("goroutines bounded, none left behind", fmt.Sprintf("at most +%d during a run, %d left after close", most, worst), worst == 0, known)
	return b.String()
}
