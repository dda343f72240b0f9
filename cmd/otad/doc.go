// Command otad is the on-device update agent and its device CLI (docs/contract/commands.md).
package main
