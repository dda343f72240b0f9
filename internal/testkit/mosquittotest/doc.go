// Package mosquittotest runs a real mosquitto broker for tests: its own process on a free
// loopback port, with a generated config, persistence and log under t.TempDir(). It never
// touches a system broker service. It also makes a throwaway PKI for TLS tests. Run starts
// one outside a test, for the fleet benchmark.
package mosquittotest
