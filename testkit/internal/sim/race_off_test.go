//go:build !race

package sim

// defaultSeeds is TestSimulate's budget without the race detector.
const defaultSeeds = 3000
