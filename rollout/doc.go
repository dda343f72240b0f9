// Package rollout releases one signed offer to a group of devices in waves
// and halts by itself when too many fail (docs/contract/rollouts.md).
//
// It is pure, like agent.Step: the plan (plan.go) is parsed and checked
// strictly; wave membership (members.go) is a stable order by the SHA-256 of
// (rollout name, device ID), so any controller computes the same waves; the
// state (state.go) is everything a controller needs to go on, published
// retained on ota/rollouts/{name}/state; and Step (step.go) takes the state,
// the plan, one input (the fleet as observed, an operator command, or the
// driver's confirmation that a wave's offers are out) and the time, and
// returns the new state and the actions to carry out. Driver (driver.go)
// carries them out: it adopts a state only once the broker has it and
// publishes offers only after the state naming their devices, so a
// controller killed at any point starts again from the retained state alone.
// Render (render.go) shows a state to people.
//
// The rules, and the format of the plan and the state, are in docs/contract/rollouts.md.
package rollout
