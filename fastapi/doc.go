// Package fastapi is the HTTP surface of the service on fasthttp, and its MCP
// endpoint: one route table, request ids, body limits, decoding, and the
// rendering of answers and refusals. A handler decodes its request, calls
// one function of the transport-free pipeline (actors/checks) and encodes
// what it returns; the admin API, the token endpoint and the status pages
// call typed actor clients directly. It also serves the operator console
// (fastapi/console), on its own listener with Config.AdminSeparate, and
// records every answer in the Prometheus metrics (internal/metrics) that
// GET /metrics shows the operator. It never imports Pebble, protoactor or
// storage (internal/archtest).
package fastapi
