package ota

import (
	"crypto/sha256"
	"strings"
	"testing"
)

func TestParseSHA256(t *testing.T) {
	sum := sha256.Sum256([]byte("image"))
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"6105d6cc76af400325e94d588ce511be5bfdbb73b437dc51eca43917d7a43e3d", true},
		{"6105D6CC76AF400325E94D588CE511BE5BFDBB73B437DC51ECA43917D7A43E3D", true},
		{"", false},
		{strings.Repeat("0", 63), false},
		{strings.Repeat("0", 65), false},
		{strings.Repeat("g", 64), false},
	} {
		got, ok := ParseSHA256(c.in)
		if ok != c.ok || (ok && got != sum) {
			t.Errorf("ParseSHA256(%q) = %x, %v; want %v", c.in, got, ok, c.ok)
		}
	}
}
