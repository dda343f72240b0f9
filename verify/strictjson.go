package verify

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
)

// duplicateKey returns the path of the first object key that repeats an
// earlier key of the same object, compared the way encoding/json matches
// fields (case-insensitively: "devices" and "DEVICES" are one field to it).
// Decoders disagree on which duplicate wins, so a signed document must not
// leave that choice open. It returns "" when there is none, and when b is not
// JSON at all (the decoder proper says why).
func duplicateKey(b []byte) string {
	dec := json.NewDecoder(bytes.NewReader(b))
	dup, _ := walkJSON(dec, "")
	return dup
}

func walkJSON(dec *json.Decoder, path string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return "", err
			}
			key, _ := k.(string)
			sub := strings.TrimPrefix(path+"."+key, ".")
			fk := foldKey(key)
			if seen[fk] {
				return sub, nil
			}
			seen[fk] = true
			if dup, err := walkJSON(dec, sub); dup != "" || err != nil {
				return dup, err
			}
		}
		_, err = dec.Token()
		return "", err
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if dup, err := walkJSON(dec, path+"["+strconv.Itoa(i)+"]"); dup != "" || err != nil {
				return dup, err
			}
		}
		_, err = dec.Token()
		return "", err
	}
	return "", nil
}

// foldKey maps every rune to the smallest rune of its case-folding orbit:
// keys that encoding/json would match to one field get one foldKey.
func foldKey(s string) string {
	return strings.Map(func(r rune) rune {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		return m
	}, s)
}

// DuplicateKey is duplicateKey for the other strict documents of the
// project (the root of trust, docs/contract/trust.md).
func DuplicateKey(b []byte) string { return duplicateKey(b) }
