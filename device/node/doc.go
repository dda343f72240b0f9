// Package node assembles otad's agent for this device: from a config, the
// concrete bootloader backend, slot writer, offer checks, health command and
// reboot behind the agent's interfaces (Build), then the agent on those parts
// (Assemble). Open does both, for `otad` and the simulated devices; a test or
// a simulated fleet replaces parts between the two steps.
package node
