// Package rollout releases one signed offer to a group of devices in waves
// and halts by itself when too many fail (docs/contract/rollouts.md).
//
// The core is pure, like agent.Step: the plan (plan.go) is parsed and
// checked strictly; wave membership (members.go) is a stable order by the
// SHA-256 of (rollout name, device ID), so any controller computes the same
// waves; OutcomeOf (outcome.go) is the one rule of what came of an offer on
// a device, which the fleet view, the demo and the benchmarks share; the
// state (state.go) is everything a controller needs to go on, published
// retained on ota/rollouts/{name}/state; operator commands (command.go) are
// decoded strictly; and Step (step.go) takes the state, the plan, one input
// (the fleet as observed, an operator command, or the driver's confirmation
// that a wave's offers are out) and the time, and returns the new state and
// the actions to carry out. Render (render.go) shows a state to people.
//
// The package is pure: no MQTT, no network, no clock of its own
// (deps_test.go). The controller that meets the world — the driver, the
// lease's reads and client ID, the inbox of the rollout's topics, the
// tracker and observer of the fleet, the sessions — is rollout/controller.
package rollout
