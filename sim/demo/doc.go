// Package demo is `otasim demo` (docs/operating.md): the whole flow on one machine
// with nothing but Go. It starts an embedded MQTT broker and an image server
// on 127.0.0.1 and several simulated devices that run real agents, types the
// operator's commands into otactl (keygen, sign, publish), follows the fleet
// through fleetview until every device has an outcome, then does it again
// with a broken image that the devices' health check rolls back.
//
// It lives here rather than in cmd/otasim so that cmd/ stays wiring (flags,
// exit codes) and the demo's parts are tested as a package; otactl does not
// import it, so the operator CLI ships no device code.
package demo
