package cli

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  string
	}{
		{"0", 0, ""}, {"4096", 4096, ""}, {"512B", 512, ""}, {"64KiB", 64 << 10, ""}, {"256MiB", 256 << 20, ""},
		{"1GiB", 1 << 30, ""}, {" 8 MiB ", 8 << 20, ""}, {"1024GiB", 1 << 40, ""},
		{"", 0, "byte count"}, {"GiB", 0, "byte count"}, {"1.5GiB", 0, "byte count"}, {"4MB", 0, "byte count"},
		{"3M", 0, "byte count"}, {"1TiB", 0, "byte count"}, {"-1MiB", 0, "byte count"}, {"lots", 0, "byte count"},
		{"1025GiB", 0, "1 TiB"}, {"9223372036854775807GiB", 0, "1 TiB"},
	}
	for _, tt := range tests {
		got, err := ParseBytes(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseBytes(%q) = %d, %v; want error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"1GiB", "256MiB", "4096", "0", "-3KiB", "9223372036854775807", "99999999999GiB", " 1 MiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err != nil {
			return
		}
		if n < 0 || n > MaxBytes {
			t.Fatalf("ParseBytes(%q) = %d", s, n)
		}
		if v, perr := strconv.ParseInt(strings.TrimSpace(s), 10, 64); perr == nil && v != n {
			t.Fatalf("ParseBytes(%q) = %d, want %d", s, n, v) // a plain number means bytes
		}
	})
}
