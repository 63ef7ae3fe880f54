// Package intel holds the service's pure intelligence: feed snapshots, address
// parsing, and the decision engine. Nothing under intel performs I/O on the
// request path or imports another package of this module.
package intel
