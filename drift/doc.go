// Package drift holds the validity arithmetic of the Redlock algorithm.
//
// A lock acquired with a time to live ttl, in a round that took elapsed
// time on the client's monotonic clock, is valid for
//
//	validity = ttl − elapsed − allowance,  allowance = ttl × factor + 2 ms
//
// The allowance covers the rate difference between the clocks of the client
// and of the Redis servers (factor, 0.01 by default: the clocks may run 1 %
// apart) and Redis' own expiry precision (1 ms) plus 1 ms of rounding.
//
// Every function here is pure: no clock is read, nothing is shared, and all
// of them are safe for concurrent use.
package drift
