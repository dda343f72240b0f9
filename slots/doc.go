// Package slots is the A/B slot model on the device: booted-slot detection
// from the kernel command line, the streaming slot writer that downloads,
// decompresses, hashes and writes an image into the inactive slot, and the
// chunked writer (docs/contract/chunked.md, WriteChunked) that checks every chunk against a
// signed index before writing it, takes what the slots already hold, fetches
// the rest in range requests, and resumes from a durable checkpoint. Slot
// names themselves are ota.Slot.
package slots
