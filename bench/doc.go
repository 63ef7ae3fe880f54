// Package bench is the load suite behind cmd/fraudbench: scenarios, open- and
// closed-loop drivers, latency histograms and reports. It speaks HTTP only.
package bench
