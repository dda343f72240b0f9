// Package verify holds the offer envelope and manifest formats (SPEC §3, §4), the
// signature checks over them (sigstore verifiers) and the offer policy of SPEC §5.
//
// Nothing inside an envelope's manifest is parsed before its signatures verify.
package verify

import (
	"errors"
	"strings"
)

// Code is a refusal code of SPEC §5. The strings are part of the external contract.
type Code string

// The refusal codes of SPEC §5, in the order the checks run.
const (
	CodeTooLarge         Code = "too_large"
	CodeBadEnvelope      Code = "bad_envelope"
	CodeBadSignature     Code = "bad_signature"
	CodeBadManifest      Code = "bad_manifest"
	CodeIncompatible     Code = "incompatible"
	CodeNotForThisDevice Code = "not_for_this_device"
	CodeExpired          Code = "expired"
	CodeDowngrade        Code = "downgrade"
	CodeStale            Code = "stale"
	CodeTooBigForSlot    Code = "too_big_for_slot"
	CodeURLNotAllowed    Code = "url_not_allowed"
)

// MaxEnvelopeSize is the largest envelope accepted (SPEC §4); larger ones are refused unparsed.
const MaxEnvelopeSize = 256 << 10

// RefusedError is an offer refusal (SPEC §5). Field names the JSON path at fault, when
// there is one; Err is the underlying cause, when there is one.
type RefusedError struct {
	Code  Code
	Field string
	Msg   string
	Err   error
}

// Error reads like "bad_manifest: payload.sha256: want 64 hex digits".
func (e *RefusedError) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Code))
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying cause.
func (e *RefusedError) Unwrap() error { return e.Err }

// CodeOf returns the refusal code carried by err, or "" when err is not a refusal.
func CodeOf(err error) Code {
	var re *RefusedError
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}

func refuse(code Code, field, msg string) *RefusedError {
	return &RefusedError{Code: code, Field: field, Msg: msg}
}

func refuseErr(code Code, field, msg string, err error) *RefusedError {
	return &RefusedError{Code: code, Field: field, Msg: msg, Err: err}
}
