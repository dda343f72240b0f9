// Package config loads and validates /etc/otad/otad.toml (docs/contract/config.md).
package config
