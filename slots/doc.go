// Package slots is the A/B slot model on the device: booted-slot detection
// from the kernel command line, the target a write goes to (Target: a
// block device or file, File, or another implementation such as the
// simulator's slots in memory), the streaming slot writer that
// decompresses, hashes and writes an image into the inactive slot and reads
// it back, and the chunked writer (docs/contract/chunked.md, WriteChunked)
// that checks every chunk against a signed index before writing it, takes
// what the slots already hold, fetches the rest in range requests, and
// resumes from a durable checkpoint. Downloads are package fetch's; slot
// names are ota.Slot.
package slots
