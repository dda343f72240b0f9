// Package brokertest runs the same integration tests against every MQTT
// broker otad supports in CI: Mosquitto and RabbitMQ's MQTT plugin, each a
// real process of the test on free ports (mosquittotest, rabbitmqtest). A
// test that depends on one broker's behaviour says so through Kind's
// fields. Proxy stands between a device and its broker to cut the network.
package brokertest
