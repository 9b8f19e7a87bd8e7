//go:build !quorumlock_oldextend

package scripts

import _ "embed"

//go:embed extend.lua
var extendSrc string
