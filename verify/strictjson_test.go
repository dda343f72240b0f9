package verify

import "testing"

func TestDuplicateKey(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"a":1,"b":2}`, ""},
		{`{"a":1,"a":2}`, "a"},
		{`{"devices":["x"],"DEVICES":["y"]}`, "DEVICES"},
		{`{"payload":{"size":1,"Size":2}}`, "payload.Size"},
		{`{"l":[{"k":1},{"k":1,"k":2}]}`, "l[1].k"},
		{"{\"k\":1,\"\u212a\":2}", "\u212a"}, // KELVIN SIGN folds to k, as encoding/json matches it
		{`{"a":{"b":1},"b":2}`, ""},
		{`not json`, ""},
		{`{"a":1,`, ""},
	} {
		if got := duplicateKey([]byte(c.in)); got != c.want {
			t.Errorf("duplicateKey(%s) = %q, want %q", c.in, got, c.want)
		}
	}
}

func FuzzDuplicateKey(f *testing.F) {
	f.Add([]byte(`{"a":[1,{"b":2,"B":3}]}`))
	f.Fuzz(func(t *testing.T, b []byte) { duplicateKey(b) })
}
