package verify

import (
	"encoding/json"
	"fmt"
)

// EnvelopeAttempt is the envelope's attempt counter: a number outside the
// signature (docs/contract/formats.md) that `otactl publish --retry` raises.
// A device starts a retryable ending of the offer again when the counter is
// greater than any it saw for the offer; a final ending never. 0 when absent
// or not a number: the counter is not signed, so it decides nothing else.
func EnvelopeAttempt(raw []byte) int64 {
	var in struct {
		Attempt int64 `json:"attempt"`
	}
	if json.Unmarshal(raw, &in) != nil || in.Attempt < 0 {
		return 0
	}
	return in.Attempt
}

// WithAttempt returns the envelope raw with its attempt counter set to n;
// the manifest and signatures are kept byte for byte.
func WithAttempt(raw []byte, n int64) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	b, err := json.Marshal(n)
	if err != nil {
		return nil, err
	}
	m["attempt"] = b
	return json.Marshal(m)
}
