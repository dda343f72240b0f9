package config

import (
	"fmt"
	"strings"

	"github.com/otad/otad/tomlkeys"
)

// miscased names every key written in another case than its documented
// spelling (Compatible, [Slots] a): go-toml matches keys case-insensitively,
// so such a key would override or sit beside the real one unseen, where a
// key otad does not know is an error (docs/contract/config.md).
func miscased(data []byte, path string) []error {
	spelling := map[string]string{} // lower-cased: the documented spelling
	for _, k := range knownKeys() {
		parts := strings.Split(k, ".")
		for i := range parts {
			p := strings.Join(parts[:i+1], ".")
			spelling[strings.ToLower(p)] = p
		}
	}
	var errs []error
	for _, w := range tomlkeys.Written(data) {
		if known, ok := spelling[strings.ToLower(w.Name)]; ok && known != w.Name {
			errs = append(errs, &Error{Path: path, Key: w.Name,
				Msg: fmt.Sprintf("line %d: unknown key: keys are case-sensitive, the key is %q", w.Line, known)})
		}
	}
	return errs
}
