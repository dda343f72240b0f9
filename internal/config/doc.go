// Package config loads and validates /etc/otad/otad.toml (SPEC §10).
package config
