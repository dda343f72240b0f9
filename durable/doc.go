// Package durable replaces small files so that a crash or power cut leaves the
// old or the new content, never a mix: the journal, the chunked install's
// checkpoint and the kept indexes. A leaf: standard library only.
package durable
