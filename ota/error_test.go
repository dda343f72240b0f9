package ota

import (
	"errors"
	"testing"
)

func TestError(t *testing.T) {
	cause := errors.New("boom")
	tests := []struct {
		err  *Error
		want string
	}{
		{FieldErrorf(CodeBadManifest, "payload.sha256", "want 64 hex digits"), "bad_manifest: payload.sha256: want 64 hex digits"},
		{Errorf(CodeTooLarge, "too big"), "too_large: too big"},
		{Wrap(CodeBadEnvelope, cause), "bad_envelope: boom"},
		{&Error{Code: CodeBadManifest, Field: "issued_at", Err: cause}, "bad_manifest: issued_at: boom"},
		{&Error{Code: CodeHashMismatch}, "hash_mismatch"},
		// A cause that already leads with the code is not prefixed twice.
		{Wrap(CodeWriteFailed, Errorf(CodeWriteFailed, "disk gone")), "write_failed: disk gone"},
		{Wrap(CodeCancelled, Errorf(CodeWriteFailed, "disk gone")), "cancelled: write_failed: disk gone"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		wrapped := errors.Join(errors.New("context"), tt.err)
		if CodeOf(wrapped) != tt.err.Code {
			t.Errorf("CodeOf(wrapped) = %q, want %q", CodeOf(wrapped), tt.err.Code)
		}
	}
	if !errors.Is(Wrap(CodeBadEnvelope, cause), cause) {
		t.Error("Unwrap does not reach the cause")
	}
	if CodeOf(cause) != "" || CodeOf(nil) != "" {
		t.Error("CodeOf of an uncoded error is not empty")
	}
}

func TestVocabulary(t *testing.T) {
	if SlotA.Other() != SlotB || SlotB.Other() != SlotA || Slot("C").Other() != "" {
		t.Error("Other does not pair A and B")
	}
	if _, err := ParseSlot("a"); err == nil {
		t.Error(`ParseSlot("a") accepted a lower-case name`)
	}
	for _, c := range []Code{CodeTooLarge, CodeNotYetValid, CodeURLNotAllowed} {
		if !c.Refusal() {
			t.Errorf("%s is not a refusal", c)
		}
	}
	for _, c := range []Code{CodeHashMismatch, CodeCancelled, CodeChunkMismatch, ""} {
		if c.Refusal() {
			t.Errorf("%q is a refusal", c)
		}
	}
	if CodeBadSignature.Authentic() || !CodeStale.Authentic() || CodeHashMismatch.Authentic() {
		t.Error("Authentic: only refusals after the signature and manifest checks name their offer")
	}
	exits := map[Result]int{ResultStaged: ExitOK, ResultUpToDate: ExitOK, ResultRejected: ExitRefused, ResultFailed: ExitFailure, ResultSuperseded: ExitFailure}
	for r, want := range exits {
		if got := r.ExitCode(); got != want {
			t.Errorf("%s exits %d, want %d", r, got, want)
		}
	}
}
