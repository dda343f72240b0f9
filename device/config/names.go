package config

import (
	"fmt"

	"github.com/otad/otad/mqtt"
)

// nameErrors refuses a device ID, group or topic prefix a topic cannot carry
// on every supported broker (mqtt.CheckName), naming the key: such a device
// would connect and then silently never receive its offers.
func (c *Config) nameErrors() []error {
	var errs []error
	check := func(key, v, from string) {
		if err := mqtt.CheckName(v); err != nil {
			errs = append(errs, &Error{Path: c.Path, Key: key, Msg: from + err.Error()})
		}
	}
	from := ""
	if c.deviceIDFrom != "" {
		from = fmt.Sprintf("not set, and the machine ID from %s is not a valid device ID: ", c.deviceIDFrom)
	}
	check("device_id", c.DeviceID, from)
	check("mqtt.topic_prefix", c.MQTT.TopicPrefix, "")
	for i, g := range c.MQTT.Groups {
		check(fmt.Sprintf("mqtt.groups[%d]", i), g, "")
	}
	return errs
}
