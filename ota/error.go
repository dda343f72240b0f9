package ota

import (
	"errors"
	"fmt"
	"strings"
)

// Error is a refusal or failure that carries its code. Its text reads like
// "bad_manifest: payload.sha256: want 64 hex digits".
type Error struct {
	Code Code
	// Field is the JSON path at fault, when there is one.
	Field string
	// Err is the cause; its text names the file, URL, offset or value at fault.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Code))
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	if e.Err != nil {
		msg := e.Err.Error()
		if e.Field == "" && strings.HasPrefix(msg, string(e.Code)+":") {
			return msg // the cause already leads with this code
		}
		b.WriteString(": ")
		b.WriteString(msg)
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error whose cause is fmt.Errorf(format, args...).
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Err: fmt.Errorf(format, args...)}
}

// FieldErrorf is Errorf naming the JSON path at fault.
func FieldErrorf(code Code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Err: fmt.Errorf(format, args...)}
}

// Wrap gives err a code.
func Wrap(code Code, err error) *Error { return &Error{Code: code, Err: err} }

// CodeOf returns the code of the first *Error in err's chain, or "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
