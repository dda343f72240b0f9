// Package verify holds the offer envelope and manifest formats (docs/contract/formats.md), the
// signature checks over them (sigstore verifiers) and the offer policy of docs/contract/checks.md.
//
// Nothing inside an envelope's manifest is parsed before its signatures verify.
package verify
