package rollout

import (
	"bytes"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/otad/otad/verify"
)

// The control plane is signed (docs/contract/rollouts.md, a signed control
// plane): everything written under {prefix}/rollouts/ — the state with its
// lease, the per-device records, the operator's commands — is a Signed
// message, made with an operator key (trust.md, the operator role). Its
// signature covers the topic it is meant for (a record cannot stand for
// another device's, a state for another rollout's) and a counter, which
// rises with every message a topic carries, so that an older message
// published again is told from the newest.

// SignedType marks the signed bytes: an operator key's signature over a
// rollout message can never stand for an offer or a root.
const SignedType = "otad-rollout-v1"

// Signed is a message of the control plane as it travels.
type Signed struct {
	Type       string             `json:"type"`
	Topic      string             `json:"topic"`
	Counter    uint64             `json:"counter"`
	Payload    json.RawMessage    `json:"payload"`
	Signatures []verify.Signature `json:"signatures"`
}

// signedBytes are the bytes signed: the type, topic and counter on lines
// of their own, then the payload as it travels.
func signedBytes(topic string, counter uint64, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteString(SignedType + "\n" + topic + "\n" + strconv.FormatUint(counter, 10) + "\n")
	b.Write(payload)
	return b.Bytes()
}

// Seal signs payload (JSON) for topic with counter. With no key it returns
// payload as it is: an unsigned control plane, which readers take only
// when told to (Trust.Unsigned).
func Seal(key crypto.Signer, topic string, counter uint64, payload []byte) ([]byte, error) {
	if key == nil {
		return payload, nil
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, payload); err != nil {
		return nil, fmt.Errorf("sign %s: %w", topic, err)
	}
	sig, err := verify.SignManifest(signedBytes(topic, counter, compact.Bytes()), key)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", topic, err)
	}
	// The payload goes out as the bytes signed: no HTML escaping of it.
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(Signed{Type: SignedType, Topic: topic, Counter: counter, Payload: compact.Bytes(), Signatures: []verify.Signature{sig}}); err != nil {
		return nil, fmt.Errorf("sign %s: %w", topic, err)
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// ErrForged marks a message of the control plane that is not signed by a
// trusted operator key: it is taken for absent (errors.Is).
var ErrForged = errors.New("not signed by a trusted operator key")

// ErrReplayed marks a signed message older than one already seen on its
// topic.
var ErrReplayed = errors.New("older than one already seen")

// Trust is whom a reader of the control plane believes: the operator keys
// (a --trust directory, or a root's operator role), and whether unsigned
// messages are taken as they are (--insecure-unsigned).
type Trust struct {
	Keys     *verify.Keyring
	Unsigned bool
}

// Open checks msg, read on topic, and returns its payload and counter.
// A message not signed by a trusted key over this topic is ErrForged (an
// unsigned one too, unless t.Unsigned; its counter is then 0). what names
// the message for the error ("state", "command", "record").
func (t Trust) Open(what, topic string, msg []byte) ([]byte, uint64, error) {
	forged := func(why string) error {
		return fmt.Errorf("forged %s on %s ignored: %w%s", what, topic, ErrForged, why)
	}
	var s Signed
	if err := json.Unmarshal(msg, &s); err != nil || s.Type != SignedType {
		if t.Unsigned {
			return msg, 0, nil
		}
		return nil, 0, forged(" (an unsigned message)")
	}
	if s.Topic != topic {
		return nil, 0, forged(fmt.Sprintf(" (signed for %s)", s.Topic))
	}
	if t.Keys == nil || t.Keys.Len() == 0 {
		if t.Unsigned {
			return s.Payload, s.Counter, nil
		}
		return nil, 0, forged(" (no operator keys are trusted)")
	}
	if err := t.Keys.VerifyThreshold(signedBytes(topic, s.Counter, s.Payload), s.Signatures, 1); err != nil {
		return nil, 0, forged("")
	}
	return s.Payload, s.Counter, nil
}

// OpenState is Open and DecodeState: the state of a rollout read on its
// state topic, with its counter.
func (t Trust) OpenState(topic string, msg []byte) (State, uint64, error) {
	p, n, err := t.Open("state", topic, msg)
	if err != nil {
		return State{}, 0, err
	}
	s, err := DecodeState(p)
	if err != nil {
		return State{}, 0, err
	}
	return s, n, nil
}

// Counter is the counter a state is signed with: its lease's epoch, then
// its sequence number, as one number that rises with every state any
// controller publishes (State.Newer compares the same, from the signed
// payload).
func (s State) Counter() uint64 { return s.Lease.epoch()<<32 | s.Seq&(1<<32-1) }
