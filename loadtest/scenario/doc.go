// Package scenario is the library behind the load generator (go run
// ./loadtest): generators, histograms, reports and the seed scenarios.
// The fixed-rate HTTP load that `sluice loadtest` also runs is
// loadtest/openloop.
package scenario
