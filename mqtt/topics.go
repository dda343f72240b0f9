package mqtt

import "strings"

// Topics builds the docs/contract/mqtt.md topic names for a device.
type Topics struct{ Prefix, Device string }

func (t Topics) prefix() string {
	if t.Prefix == "" {
		return DefaultTopicPrefix
	}
	return t.Prefix
}

func (t Topics) device(leaf string) string {
	return t.prefix() + "/devices/" + t.Device + "/" + leaf
}

// Desired is the device's own offer topic (cloud → device, retained).
func (t Topics) Desired() string { return t.device("desired") }

// Group is group g's offer topic (cloud → device, retained).
func (t Topics) Group(g string) string { return t.prefix() + "/groups/" + g + "/desired" }

// FleetReport is where report requests to every device go.
func (t Topics) FleetReport() string { return t.prefix() + "/fleet/report" }

// GroupReport is where report requests to group g's devices go.
func (t Topics) GroupReport(g string) string { return t.prefix() + "/groups/" + g + "/report" }

// Root is the fleet's retained root of trust (docs/contract/trust.md).
func (t Topics) Root() string { return t.prefix() + "/trust/root" }

// GroupRoot is group g's retained root of trust.
func (t Topics) GroupRoot(g string) string { return t.prefix() + "/groups/" + g + "/trust/root" }

// Status is the retained status snapshot topic.
func (t Topics) Status() string { return t.device("status") }

// Events is the per-transition event topic.
func (t Topics) Events() string { return t.device("events") }

// Progress is the download progress topic.
func (t Topics) Progress() string { return t.device("progress") }

// Online is the retained presence topic the Last Will clears.
func (t Topics) Online() string { return t.device("online") }

// DeviceOf returns the device ID in a device topic under prefix
// ("ota/devices/gw-1/status" → "gw-1", "status"), or ok false.
func DeviceOf(prefix, topic string) (device, leaf string, ok bool) {
	if prefix == "" {
		prefix = DefaultTopicPrefix
	}
	rest, found := strings.CutPrefix(topic, prefix+"/devices/")
	if !found {
		return "", "", false
	}
	device, leaf, found = strings.Cut(rest, "/")
	if !found || device == "" || leaf == "" || strings.Contains(leaf, "/") {
		return "", "", false
	}
	return device, leaf, true
}

// RolloutState is rollout name's retained state topic (docs/contract/rollouts.md).
func (t Topics) RolloutState(name string) string { return t.prefix() + "/rollouts/" + name + "/state" }

// RolloutControl is rollout name's operator command topic (pause, resume, abort).
func (t Topics) RolloutControl(name string) string {
	return t.prefix() + "/rollouts/" + name + "/control"
}

// RolloutDevice is the retained record a rollout keeps of one device
// (docs/contract/rollouts.md, per-device records).
func (t Topics) RolloutDevice(name, device string) string {
	return t.prefix() + "/rollouts/" + name + "/devices/" + device
}

// RolloutDevices is the wildcard filter of a rollout's per-device records.
func (t Topics) RolloutDevices(name string) string {
	return t.prefix() + "/rollouts/" + name + "/devices/+"
}
