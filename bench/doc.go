// Package bench is the load suite behind cmd/fraudbench: scenarios, open- and
// closed-loop drivers, latency histograms and reports. It speaks HTTP only
// and imports nothing of the service (a house-rule test enforces it), so it
// measures what a client sees.
//
// A Scenario's set-up creates its own accounts through the admin API, mints
// what it needs and probes each request kind once; the result is a Workload,
// a weighted mix of Parts that fill fasthttp requests. Run drives a Workload
// against a Target in a closed loop (N connections, as fast as answers come)
// or an open loop (a fixed arrival rate, latency from each request's due time,
// so stalls are not hidden). RunSuite ties it together: it starts fraudd (or
// targets a URL), starts the floor — a bare fasthttp server answering the
// same requests with a body of the same size — runs each scenario against the
// floor and then the server, samples both processes' CPU time and peak RSS
// from /proc, and returns a Report that prints as a table, encodes as JSON
// and draws as SVG.
package bench
