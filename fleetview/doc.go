// Package fleetview is the cloud side's view of a fleet: it follows every
// device's retained status, online flag and progress reports (SPEC §8) from
// the broker, tells when a rollout has settled on each device, and renders
// the fleet table. `otactl status`, the demo (cmd/otasim) and the fleet
// benchmark all watch the fleet through it. It imports the agent's status
// types and the MQTT transport, and no device code.
package fleetview
