// Package crashstate explores the states storage may hold after a power cut
// at any point of a whole update, and checks that otad survives each one
// (issue 21, docs/design.md "The journal and crash safety").
//
// A device (Rig) runs a real agent, assembled with node.NewParts, on storage
// whose every write goes through a recording layer at the product's own
// seams: the journal, the chunked install's checkpoint and kept indexes
// (durable.FS), the boot environment (bootctl.Disk, the real U-Boot and
// GRUB formats) and the slots (slots.Target). The trace is the ordered list
// of those operations: each write with its bytes, each sync, creation,
// rename, removal and directory sync.
//
// For every point of the trace the persistence model (Model) builds the
// states storage may hold if the power went there: synced writes are kept;
// the others are dropped, kept, or kept in part (every prefix of them in
// order, a bounded number of seeded subsets, the last one torn at sector
// boundaries and within its last sector); a creation, rename or removal not
// followed by a sync of its directory may be lost. On each state the Rig
// powers the device on (the bootloader's rules over the real env formats),
// checks the slot it picks, starts the agent, lets the update go on to its
// end and checks the invariants (check.go).
package crashstate
