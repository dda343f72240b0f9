package ota

// MaxEnvelopeSize is the largest offer envelope a device accepts (SPEC §4):
// a larger one is refused (too_large) before it is parsed, and an MQTT
// message over it is dropped before it is read.
const MaxEnvelopeSize = 256 << 10
