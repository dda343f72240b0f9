package ota

// MaxEnvelopeSize is the largest offer envelope a device accepts (docs/contract/formats.md):
// a larger one is refused (too_large) before it is parsed, and an MQTT
// message over it is dropped before it is read.
const MaxEnvelopeSize = 256 << 10

// Schemes are the URL schemes a device can be configured to fetch payloads
// from ([download] schemes; docs/contract/checks.md check 11); any other is url_not_allowed.
func Schemes() []string { return []string{"https", "http", "file"} }
