//go:build race

package sim

// defaultSeeds is TestSimulate's budget: the race detector slows a schedule
// about sixfold, and make test also runs the simulator without it.
const defaultSeeds = 300
