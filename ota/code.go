package ota

// Code names why an offer was refused or an install failed.
type Code string

// Refusal codes: the offer checks, in the order they run.
const (
	CodeTooLarge         Code = "too_large"
	CodeBadEnvelope      Code = "bad_envelope"
	CodeBadSignature     Code = "bad_signature"
	CodeBadManifest      Code = "bad_manifest"
	CodeIncompatible     Code = "incompatible"
	CodeNotForThisDevice Code = "not_for_this_device"
	CodeExpired          Code = "expired"
	CodeNotYetValid      Code = "not_yet_valid"
	CodeDowngrade        Code = "downgrade"
	CodeStale            Code = "stale"
	CodeTooBigForSlot    Code = "too_big_for_slot"
	CodeURLNotAllowed    Code = "url_not_allowed"
)

// Failure codes of an accepted offer's install.
const (
	CodeDownloadFailed         Code = "download_failed"
	CodeSizeMismatch           Code = "size_mismatch"
	CodeHashMismatch           Code = "hash_mismatch"
	CodeWriteFailed            Code = "write_failed"
	CodeReadbackMismatch       Code = "readback_mismatch"
	CodeHealthCheckFailed      Code = "health_check_failed"
	CodeRolledBackByBootloader Code = "rolled_back_by_bootloader"
	CodeCancelled              Code = "cancelled"
	CodeIndexMismatch          Code = "index_mismatch" // chunked payloads
	CodeChunkMismatch          Code = "chunk_mismatch" // chunked payloads
)

// Root-of-trust refusal codes (docs/contract/trust.md): a root document or
// chain was refused and the trusted root did not change.
const (
	CodeBadRoot        Code = "bad_root"         // not a well-formed root document
	CodeRootSignature  Code = "root_signature"   // too few of the root keys signed it
	CodeRootVersion    Code = "root_version"     // not newer, or not the next version
	CodeRootChainLimit Code = "root_chain_limit" // more steps than a device walks at once
)

// Refusal reports whether c is an offer-check code: the offer was refused
// before anything was downloaded or written.
func (c Code) Refusal() bool {
	switch c {
	case CodeTooLarge, CodeBadEnvelope, CodeBadSignature, CodeBadManifest, CodeIncompatible,
		CodeNotForThisDevice, CodeExpired, CodeNotYetValid, CodeDowngrade, CodeStale,
		CodeTooBigForSlot, CodeURLNotAllowed:
		return true
	}
	return false
}

// Authentic reports whether a refusal with this code came after the
// signatures verified and the manifest parsed: the refused offer can be named.
func (c Code) Authentic() bool {
	switch c {
	case CodeTooLarge, CodeBadEnvelope, CodeBadSignature, CodeBadManifest:
		return false
	}
	return c.Refusal()
}
