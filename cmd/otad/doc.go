// Command otad is the on-device update agent and its device CLI (SPEC §9).
package main
