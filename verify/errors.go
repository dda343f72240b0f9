package verify

import (
	"errors"
	"fmt"

	"github.com/otad/otad/ota"
)

// refuse is a refusal naming the JSON path at fault (field, when there is one).
func refuse(code ota.Code, field, msg string) *ota.Error {
	e := &ota.Error{Code: code, Field: field}
	if msg != "" {
		e.Err = errors.New(msg)
	}
	return e
}

// refuseErr is refuse with an underlying cause.
func refuseErr(code ota.Code, field, msg string, err error) *ota.Error {
	e := &ota.Error{Code: code, Field: field, Err: err}
	if msg != "" {
		e.Err = fmt.Errorf("%s: %w", msg, err)
	}
	return e
}
