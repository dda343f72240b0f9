//go:build tools

// Package deps pins the modules the design names until the code imports them.
package deps

import (
	_ "github.com/coreos/go-systemd/v22/daemon"
	_ "github.com/eclipse/paho.mqtt.golang"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/klauspost/compress/zstd"
	_ "github.com/pelletier/go-toml/v2"
	_ "github.com/sigstore/sigstore/pkg/signature"
	_ "github.com/ulikunitz/xz"
	_ "golang.org/x/sys/unix"
)
