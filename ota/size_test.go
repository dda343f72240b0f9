package ota

import "testing"

func TestSize(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 bytes"},
		{1023, "1023 bytes"},
		{1024, "1.0 KiB (1024 bytes)"},
		{83886080, "80.0 MiB (83886080 bytes)"},
		{67108864, "64.0 MiB (67108864 bytes)"},
		{3 << 30, "3.0 GiB (3221225472 bytes)"},
		{5 << 40, "5.0 TiB (5497558138880 bytes)"},
	} {
		if got := Size(c.n); got != c.want {
			t.Errorf("Size(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
