// Package daemon is `otad run`: the device's agent (device/node) wired to
// MQTT, the control socket, the trust directory watcher and systemd's notify
// protocol. Simulated devices use its pieces (New, ConnectMQTT) without the
// control socket.
package daemon
