package operator

import (
	"flag"
	"io"

	"github.com/otad/otad/internal/cli"
)

// The commands use the shared command-line pieces (internal/cli) under
// short names.
var (
	parseFlags = cli.Parse
	usagef     = cli.Usagef
)

type stringList = cli.StringList

// newFlagSet makes the flag set of "otactl NAME".
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	return cli.NewFlagSet("otactl "+name, synopsis, stderr)
}
