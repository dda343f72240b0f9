// Package backoff is the one retry delay of the project: exponential
// backoff with full jitter, used by the device's MQTT reconnects and by
// downloads (docs/contract/mqtt.md, docs/contract/config.md [download]).
package backoff
