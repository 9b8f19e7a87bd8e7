package scripts

import (
	"strings"

	"github.com/quorumlock/quorumlock/internal/bugs"
)

// restore keeps or drops the lines of p that a defect's fix replaced. A
// block opened by a comment line "--[fix NAME" and closed by "--]" is the
// fix of defect NAME (package bugs): kept unless the build restores the
// defect. A block opened by "--[bug NAME" is the defect's code: kept only
// when the build restores it. Blocks do not nest. Without a bug tag the
// scripts carry the fixes alone, so the defects cost the servers nothing.
func restore(p string) string {
	var b strings.Builder
	keep := true
	for line := range strings.Lines(p) {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "--[fix "):
			keep = !bugs.Restored(strings.TrimPrefix(t, "--[fix "))
		case strings.HasPrefix(t, "--[bug "):
			keep = bugs.Restored(strings.TrimPrefix(t, "--[bug "))
		case t == "--]":
			keep = true
		case keep:
			b.WriteString(line)
		}
	}
	return b.String()
}
