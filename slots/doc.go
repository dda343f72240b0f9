// Package slots is the A/B slot model on the device: booted-slot detection
// from the kernel command line, and the streaming slot writer that downloads,
// decompresses, hashes and writes an image into the inactive slot. Slot names
// themselves are ota.Slot.
package slots
