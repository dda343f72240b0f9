// Package verify holds the offer envelope and manifest formats (SPEC §3, §4), the
// signature checks over them (sigstore verifiers) and the offer policy of SPEC §5.
//
// Nothing inside an envelope's manifest is parsed before its signatures verify.
package verify
