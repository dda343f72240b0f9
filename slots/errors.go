package slots

import (
	"context"
	"errors"
)

// Code is a SPEC §6 failure code for an install that went wrong while writing.
type Code string

// Failure codes of the slot writer (SPEC §6).
const (
	CodeDownloadFailed   Code = "download_failed"
	CodeSizeMismatch     Code = "size_mismatch"
	CodeHashMismatch     Code = "hash_mismatch"
	CodeWriteFailed      Code = "write_failed"
	CodeReadbackMismatch Code = "readback_mismatch"
	CodeCancelled        Code = "cancelled"
)

// Error carries a failure code and the underlying cause, whose text names the
// URL, target or offset at fault.
type Error struct {
	Code Code
	Err  error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the failure code of err: the code of the first *Error in its
// chain, CodeCancelled for a context.Canceled, and "" otherwise.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.Is(err, context.Canceled) {
		return CodeCancelled
	}
	return ""
}

func newError(code Code, err error) *Error { return &Error{Code: code, Err: err} }
