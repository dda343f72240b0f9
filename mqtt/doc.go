// Package mqtt is otad's MQTT transport (docs/contract/mqtt.md): a device connection that receives
// offers from its desired topics and publishes status, events, progress and presence,
// plus the operator side's plain publish and watch clients. It deals in topics and
// []byte payloads only; decoding is the caller's business.
package mqtt
