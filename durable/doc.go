// Package durable replaces small files so that a crash or power cut leaves the
// old or the new content, never a mix: the journal, the chunked install's
// checkpoint and the kept indexes. The files live on an FS: OS in otad, a
// recorder in the crash-state explorer. A leaf: standard library only.
package durable
