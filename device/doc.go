// Package device is otad's body, the device daemon and its device CLI
// (docs/contract/commands.md): the command table, the config check, the
// offline status read from the journal, local installs through the running
// daemon or in-process, and the process's memory limits. cmd/otad only
// calls Run. The assembly it runs is device/node, the daemon device/daemon.
package device
