package payload

import (
	"errors"
	"strconv"
	"strings"
)

// Code is a SPEC §6 failure code.
type Code string

// The failure codes of chunked payloads (SPEC §6, §12).
const (
	CodeIndexMismatch Code = "index_mismatch"
	CodeChunkMismatch Code = "chunk_mismatch"
)

// noChunk marks an Error that is about the index as a whole, not one chunk.
const noChunk = -1

// Error is a refused index or chunk. Chunk is the chunk number at fault, or -1; Field
// names the index field or manifest field (chunks.*) that was wrong.
type Error struct {
	Code  Code
	Chunk int
	Field string
	Msg   string
	Err   error
}

// Error reads like "index_mismatch: chunk 7: length: 70000 exceeds chunk size 65536".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Code))
	if e.Chunk >= 0 {
		b.WriteString(": chunk ")
		b.WriteString(strconv.Itoa(e.Chunk))
	}
	for _, s := range []string{e.Field, e.Msg} {
		if s != "" {
			b.WriteString(": ")
			b.WriteString(s)
		}
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the code of the first *Error in err's chain, or "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func indexErr(chunk int, field, msg string) *Error {
	return &Error{Code: CodeIndexMismatch, Chunk: chunk, Field: field, Msg: msg}
}

func chunkErr(chunk int, msg string, err error) *Error {
	return &Error{Code: CodeChunkMismatch, Chunk: chunk, Msg: msg, Err: err}
}
