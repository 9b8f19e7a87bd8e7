package history

import (
	"cmp"
	"slices"
)

// checkSections: sweeping each key's sections in order of start, a section
// that started before the latest end seen so far, under another lock,
// overlaps that section (SEC). A section under a lock of several keys is a
// section of each of them. Sections of shared holders (Section.Shared) may
// overlap each other; a shared holder's section is held against the latest
// end among sections of locks held alone only. An overlap in which a section ran past its
// own holder's window is the holder's overrun, not the lock's failure: a
// note with cfg.TolerateOverruns.
func checkSections(sections []Section, holds map[string]*holding, cfg Config, r *Report) {
	if len(sections) == 0 {
		r.Skipped[SEC] = "no critical section recorded"
		return
	}
	byKey := map[string][]Section{}
	for _, sec := range sections {
		for _, k := range sec.keys() {
			byKey[k] = append(byKey[k], sec)
		}
	}
	overran := func(sec Section) bool {
		x := holds[sec.Token]
		return x != nil && sec.End > x.end
	}
	tolerated := 0
	for key, secs := range byKey {
		slices.SortFunc(secs, func(a, b Section) int { return cmp.Compare(a.Start, b.Start) })
		var last, lastAlone *Section // the sections seen so far that end last (of any kind; of locks held alone)
		for i := range secs {
			sec := &secs[i]
			against := last
			if sec.Shared {
				against = lastAlone
			}
			if against != nil && against.Token != sec.Token {
				r.Checked[SEC]++
				if sec.Start < against.End {
					over := overran(*against) || overran(*sec)
					if over && cfg.TolerateOverruns {
						tolerated++
					} else {
						r.add(SEC, key, "the critical section of %s (token %s%s) started at %v, %v before the one of %s (token %s%s) ended%s",
							sec.Client, sec.Token, sharedHint(sec.Shared), us(sec.Start), us(against.End-sec.Start), against.Client, against.Token, sharedHint(against.Shared), overrunHint(over))
					}
				}
			}
			if last == nil || sec.End > last.End {
				last = sec
			}
			if !sec.Shared && (lastAlone == nil || sec.End > lastAlone.End) {
				lastAlone = sec
			}
		}
	}
	if tolerated > 0 {
		r.note("SEC: %d overlaps of critical sections in which one ran past its lock's validity (tolerated)", tolerated)
	}
}

func overrunHint(over bool) string {
	if !over {
		return ""
	}
	return ": one of them ran past its lock's validity (check Lock.Context or Lock.Deadline before acting, and fence the resource)"
}

func sharedHint(shared bool) string {
	if shared {
		return ", shared"
	}
	return ""
}
