package mqtt

import (
	"fmt"

	"github.com/otad/otad/ota"
)

// The names a topic level carries are the vocabulary's (ota.CheckName), so
// that the pure parts (rollout plans) check them without the transport.
const MaxNameLen = ota.MaxNameLen

// ErrName marks a name a topic cannot carry on every supported broker.
var ErrName = ota.ErrName

// CheckName reports why s cannot be a device ID, a group or the topic
// prefix (docs/contract/mqtt.md): ota.CheckName.
func CheckName(s string) error { return ota.CheckName(s) }

// checkTopicPart is CheckName as a config error naming key.
func checkTopicPart(key, v string) error {
	if err := CheckName(v); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrConfig, key, err)
	}
	return nil
}

// CheckStatusTopic reports why a status snapshot on device id's status
// topic cannot be taken as that device's: an ID no device may have
// (CheckName; docs/contract/mqtt.md, names), which no offer could reach, or
// a snapshot naming another device (device is its "device" field).
func CheckStatusTopic(id, device string) error {
	if err := CheckName(id); err != nil {
		return fmt.Errorf("status on the topic of device ID %q: %w", id, err)
	}
	switch {
	case device == "": // said so, not as a device named ""
		return fmt.Errorf("status snapshot on %s's topic: its device field is missing", id)
	case device != id:
		return fmt.Errorf("status snapshot of device %q on %s's topic", device, id)
	}
	return nil
}
