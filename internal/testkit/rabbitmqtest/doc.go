// Package rabbitmqtest runs a real RabbitMQ (Debian's rabbitmq-server) with
// its MQTT plugin for tests: a node of its own, named otadtest-<random>, on
// free loopback ports, its config, data, logs and Erlang cookie under
// t.TempDir(). It never touches a system RabbitMQ service; it shares the
// machine's epmd (which the package starts on install). The node is stopped,
// and its process group killed, when the test ends.
package rabbitmqtest
