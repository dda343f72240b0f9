// Package fleetview is the cloud side's view of a fleet: it follows every
// device's retained status, online flag and progress reports (docs/contract/mqtt.md) from
// the broker, asks the devices to report (a report request, for brokers that
// deliver few or no retained messages to a wildcard subscription) and says
// how complete the view is (Coverage), tells when an offer has settled on
// each device, and renders the fleet table. `otactl status`, the rollout
// controller, the demo (cmd/otasim) and the fleet benchmark all watch the
// fleet through it. It imports the agent's status types, the MQTT transport
// and rollout, for the one rule of what came of an offer on a device
// (rollout.OutcomeOf); rollout does not import it (the controller sees the
// fleet through rollout/controller.Fleet, which a View satisfies), so the
// rule has one home and the graph no cycle. No device code.
package fleetview
