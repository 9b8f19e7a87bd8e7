package main

import (
	"errors"
	"strings"
)

// libraryTerms rewrites the library's Go names in its messages into the
// command's flags and words: a user of the command never wrote
// redlock.WithTTL or a pool.
var libraryTerms = strings.NewReplacer(
	"(see pool.WithRestartGuard)", "(see --restart-guard)",
	"pool.WithRestartGuard", "--restart-guard",
	"WithRestartGuard", "--restart-guard",
	"WithMaxWait ", "--wait ",
	"WithTTL", "--ttl",
	"WithNodeTimeout", "--node-timeout",
	"WithMetadata", "--metadata",
	"WithKeyPrefix", "--prefix",
	"WithFencing", "--fencing",
	"the TTL must be at most MaxTTL (", "the TTL must be at most ",
	"); hold a lock longer by renewing it (WithAutoExtend, Do)", "; exec and hold renew the lock while it is held",
	"give the Client one pool per independent master", "list each independent master once in --addrs or "+envAddrs,
	"redlock: pools ", "redlock: nodes ",
)

// cliTerms is err's text in the command's terms (see libraryTerms).
func cliTerms(err error) string { return libraryTerms.Replace(err.Error()) }

// flagNames is a redlock configuration error in the command's terms,
// without the package's prefix: a usage error.
func flagNames(err error) error {
	return errors.New(strings.ReplaceAll(cliTerms(err), "redlock: ", ""))
}
