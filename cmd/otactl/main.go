// Command otactl is the operator / cloud side CLI of otad (docs/contract/commands.md);
// its body is package operator.
package main

import (
	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/operator"
)

// version is set at build time with -ldflags "-X main.version=..." (make
// build: packaging/version), the same string as otad's and the package's.
var version string

func main() { cli.Main(operator.Program(cli.BuildVersion(version)).Run) }
