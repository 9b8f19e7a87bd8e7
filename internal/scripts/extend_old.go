//go:build quorumlock_oldextend

package scripts

import _ "embed"

// extendSrc, built with -tags quorumlock_oldextend only, is the extend
// script as it was before late landings were fixed (commit d3a86f9): it
// sets the TTL whatever the key had, so an extend that lands late can cut
// a later, longer one short. It exists so that the simulator can show it
// finds that bug by itself (docs/chaos.md, "Deterministic simulation");
// never ship a build with the tag.
//
//go:embed extend_old.lua
var extendSrc string
