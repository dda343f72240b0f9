// Package device lays out simulated devices: two slot files, the sim
// bootloader's state file, a trust directory, a state directory and the
// device's otad.toml, and runs a real agent on them as systemd runs otad
// (started again after every simulated reboot). The demo, the benchmarks and
// the device test kit all build their devices here, so a simulated device's
// config is written in one place.
package device
