// Package fetch downloads payloads (images, chunk indexes and stores):
// HTTP(S) with a redirect policy and the [download] TLS settings, or local
// files (file:///path). A stream (Open) resumes with Range after transient
// failures and retries with full-jitter backoff; range requests (OpenRanges)
// read a resource of known size piece by piece. Final failures are
// *ota.Error with the codes of docs/contract/installing.md.
package fetch
