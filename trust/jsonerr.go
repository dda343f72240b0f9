package trust

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"

	"github.com/otad/otad/ota"
)

// decodeError is the bad_root refusal for a document that encoding/json
// would not decode into wireDoc, in the words of docs/contract/trust.md
// rather than Go's: the JSON path at fault with its array indices
// (signed.release.keys[0].keyid), what the format wants there and what the
// document holds ("signed.version: want a whole number, got 1.0"); an
// unknown field is named with the fields its object may hold
// ("signed.expires: unknown field, want one of type, version, ..."). Only
// the wording is new: the code stays bad_root.
func decodeError(b []byte, err error) *ota.Error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field, tok := te.Field, json.Token(nil)
		if p, t, ok := valueAt(b, te.Offset); ok && samePath(p, te.Field) {
			field, tok = p, t
		}
		want, got := typeWords(te, tok)
		if field == "" {
			return bad("", "not a root document: want %s, got %s", want, got)
		}
		return bad(field, "want %s, got %s", want, got)
	}
	if name, ok := unknownFieldName(err); ok {
		if field, known, ok := unknownField(b, name); ok {
			return bad(field, "unknown field, want one of %s", strings.Join(known, ", "))
		}
		return bad("", "unknown field %q", trunc(name))
	}
	return bad("", "not a root document: %v", err)
}

// unknownFieldName is the key of encoding/json's "json: unknown field %q",
// the error DisallowUnknownFields gives (it has no type of its own).
func unknownFieldName(err error) (string, bool) {
	rest, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return "", false
	}
	name, uerr := strconv.Unquote(rest)
	return name, uerr == nil
}

// typeWords says what te's field wants and what the document holds there,
// in a reader's words rather than Go types: tok is the token found at the
// place (nil when none was: te.Value, "number 1.0", "string", "array", is
// what there is then).
func typeWords(te *json.UnmarshalTypeError, tok json.Token) (want, got string) {
	kind := reflect.Invalid
	if te.Type != nil {
		t := te.Type
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		kind = t.Kind()
	}
	switch kind {
	case reflect.String:
		want = "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "a whole number"
	case reflect.Bool:
		want = "true or false"
	case reflect.Slice, reflect.Array:
		want = "an array"
	case reflect.Struct, reflect.Map:
		want = "an object"
	default:
		want = "another type"
	}
	number := ""
	switch v := tok.(type) {
	case json.Number:
		number = string(v)
	case string:
		return want, "the string " + strconv.Quote(trunc(v))
	case bool:
		return want, strconv.FormatBool(v)
	case nil:
		what, literal, _ := strings.Cut(te.Value, " ")
		switch {
		case what == "number" && literal != "":
			number = literal
		case what == "array" || what == "object":
			return want, "an " + what
		case what == "bool":
			return want, "a boolean"
		default:
			return want, "a " + what
		}
	default: // json.Delim: an array or an object
		if tok == json.Delim('[') {
			return want, "an array"
		}
		return want, "an object"
	}
	// A number that did not fit: one with a fraction or an exponent is not
	// whole; a whole one is negative where only 0 or more will do, or out of
	// range.
	number = trunc(number)
	switch {
	case want != "a whole number" || strings.ContainsAny(number, ".eE"):
		return want, number
	case kind >= reflect.Uint && kind <= reflect.Uint64 && strings.HasPrefix(number, "-"):
		return want + ", 0 or more", number
	}
	return want, number + ", out of range"
}

// samePath says whether path (with array indices) is encoding/json's field
// (without them, and the format's spelling of each name).
func samePath(path, field string) bool {
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		if path[i] == '[' {
			for i < len(path) && path[i] != ']' {
				i++
			}
			continue
		}
		b.WriteByte(path[i])
	}
	return strings.EqualFold(b.String(), field)
}

// valueAt finds the innermost value of document b that spans offset off
// (an UnmarshalTypeError's Offset: the end of a literal, just inside an
// array or object), and returns its path and its first token.
func valueAt(b []byte, off int64) (string, json.Token, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	path, tok, ok, _ := walkTo(dec, "", off)
	return path, tok, ok
}

func walkTo(dec *json.Decoder, path string, off int64) (string, json.Token, bool, error) {
	start := dec.InputOffset()
	tok, err := dec.Token()
	if err != nil {
		return "", nil, false, err
	}
	switch tok {
	case json.Delim('{'):
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return "", nil, false, err
			}
			key, _ := k.(string)
			if p, t, ok, err := walkTo(dec, join(path, key), off); ok || err != nil {
				return p, t, ok, err
			}
		}
		if _, err := dec.Token(); err != nil {
			return "", nil, false, err
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if p, t, ok, err := walkTo(dec, path+"["+strconv.Itoa(i)+"]", off); ok || err != nil {
				return p, t, ok, err
			}
		}
		if _, err := dec.Token(); err != nil {
			return "", nil, false, err
		}
	}
	if start < off && off <= dec.InputOffset() {
		return path, tok, true, nil
	}
	return "", nil, false, nil
}

// unknownField finds, in document order, the first key of b that no field
// of the wire type receiving its object has (encoding/json matches names
// without regard to case), where encoding/json would look: it must be
// name, the key DisallowUnknownFields refused. It returns the key's path
// and the fields its object may hold.
func unknownField(b []byte, name string) (field string, known []string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	u := unknownWalk{dec: dec}
	u.walk("", reflect.TypeFor[wireDoc]())
	if !u.found || u.key != name {
		return "", nil, false
	}
	return u.field, u.known, true
}

type unknownWalk struct {
	dec        *json.Decoder
	found      bool
	key, field string
	known      []string
}

// walk reads one value at path into which encoding/json decodes type t,
// and stops (found, or false on a read error) at the first unknown key.
func (u *unknownWalk) walk(path string, t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := u.dec.Token()
	if err != nil {
		return false
	}
	switch {
	case tok == json.Delim('{') && t.Kind() == reflect.Struct:
		names, types := wireFields(t)
		for u.dec.More() {
			k, err := u.dec.Token()
			if err != nil {
				return false
			}
			key, _ := k.(string)
			i := fieldIndex(names, key)
			if i < 0 {
				u.found, u.key, u.field, u.known = true, key, join(path, printable(key)), names
				return false
			}
			if !u.walk(join(path, key), types[i]) {
				return false
			}
		}
	case tok == json.Delim('[') && t.Kind() == reflect.Slice:
		for i := 0; u.dec.More(); i++ {
			if !u.walk(path+"["+strconv.Itoa(i)+"]", t.Elem()) {
				return false
			}
		}
	case tok == json.Delim('{') || tok == json.Delim('['):
		// Not decoded into a struct or slice: nothing in it is looked up.
		for depth := 1; depth > 0; {
			tok, err := u.dec.Token()
			if err != nil {
				return false
			}
			switch tok {
			case json.Delim('{'), json.Delim('['):
				depth++
			case json.Delim('}'), json.Delim(']'):
				depth--
			}
		}
		return true
	default:
		return true
	}
	_, err = u.dec.Token()
	return err == nil
}

// wireFields are the JSON names of struct t's fields, in order, and their types.
func wireFields(t reflect.Type) ([]string, []reflect.Type) {
	var names []string
	var types []reflect.Type
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		names = append(names, name)
		types = append(types, f.Type)
	}
	return names, types
}

// fieldIndex is the index of the name key matches as encoding/json matches
// a key to a field (exactly, else without regard to case), or -1.
func fieldIndex(names []string, key string) int {
	for i, n := range names {
		if n == key {
			return i
		}
	}
	for i, n := range names {
		if strings.EqualFold(n, key) {
			return i
		}
	}
	return -1
}

// printable is an unknown key as its path shows it: as it is when it is
// a plain name, else quoted and cut short, so that no key of a hostile
// document breaks a log line or hides in one.
func printable(key string) string {
	if key == "" || len(key) > 64 {
		return strconv.Quote(trunc(key))
	}
	for _, c := range key {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return strconv.Quote(key)
		}
	}
	return key
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
