package ota

// Exit codes of both command-line tools.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
	ExitRefused = 3 // an offer was refused (a check failed)
	ExitBusy    = 4 // another install holds the state lock
	// ExitNeedsOperator: `otad run` cannot work until someone acts (an
	// unreadable boot environment); the systemd unit does not restart it.
	ExitNeedsOperator = 5
)
