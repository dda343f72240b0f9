package mqtt

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" accepted, else a substring of the error
	}{
		{"gw-0001", ""},
		{"Canary_EU-2", ""},
		{"0123456789abcdef0123456789abcdef", ""}, // a machine ID
		{strings.Repeat("x", MaxNameLen), ""},
		{"", "empty"},
		{strings.Repeat("x", MaxNameLen+1), "129 bytes"},
		{"gw.1", "RabbitMQ"},
		{"gw/1", "separator or wildcard"},
		{"gw+", "separator or wildcard"},
		{"#", "separator or wildcard"},
		{"gw 1", `' '`},
		{"gw:1", `':'`},
		{"gwé", `non-ASCII 'é'`},
		{"gw\x00", `'\x00'`},
		{"\xff", "non-ASCII"},
	}
	for _, tt := range tests {
		err := CheckName(tt.in)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckName(%q) = %v, want nil", tt.in, err)
		case tt.want != "" && (!errors.Is(err, ErrName) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("CheckName(%q) = %v, want ErrName mentioning %q", tt.in, err, tt.want)
		}
	}
}
