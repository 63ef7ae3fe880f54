// Package fastapi is the HTTP surface of the service on fasthttp: one route
// table, thin handlers (parse → authenticate → ask actors / intel → encode),
// error bodies, rate-limit headers, request ids and body limits. It talks to
// state only through typed actor clients and never imports Pebble or
// protoactor itself.
package fastapi
