// Package devicetest is a file-backed test device for integration tests:
// two slot files, the sim bootloader, a state and a trust directory, fresh
// keys, and an HTTP server for the images it signs offers for.
package devicetest
