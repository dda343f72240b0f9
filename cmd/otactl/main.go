// Command otactl is the operator / cloud side CLI of otad (docs/contract/commands.md);
// its body is package operator.
package main

import (
	"github.com/otad/otad/internal/cli"
	"github.com/otad/otad/operator"
)

func main() { cli.Main(operator.Run) }
