// Package control is the daemon's local control socket: `otad install`,
// `otad status` and the mark commands go through the running daemon's queue.
// One JSON request and one JSON response per connection.
package control
