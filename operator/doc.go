// Package otactl is the operator / cloud side CLI of otad (docs/contract/commands.md): it makes
// signing keys, signs images into offer envelopes, checks envelopes offline,
// publishes them and shows the fleet's status. cmd/otactl is its main; the
// demo (cmd/otasim) types the operator's commands into Run as a person would.
// It holds no device code: no bootloader backend, slot writer or daemon.
package operator
