package fetch

import "testing"

func TestParseContentRange(t *testing.T) {
	tests := []struct {
		in                string
		start, end, total int64
		ok                bool
	}{
		{"bytes 0-99/100", 0, 99, 100, true},
		{"bytes 5-9/*", 5, 9, -1, true},
		{"bytes */100", -1, -1, 100, false},
		{"bytes 9-5/100", -1, -1, 100, false},
		{"bytes 0-100/100", -1, -1, 100, false},
		{"items 0-1/2", -1, -1, -1, false},
		{"bytes x-1/2", -1, -1, 2, false},
		{"", -1, -1, -1, false},
	}
	for _, tt := range tests {
		s, e, tot, ok := parseContentRange(tt.in)
		if s != tt.start || e != tt.end || tot != tt.total || ok != tt.ok {
			t.Errorf("parseContentRange(%q) = %d, %d, %d, %v; want %d, %d, %d, %v", tt.in, s, e, tot, ok, tt.start, tt.end, tt.total, tt.ok)
		}
	}
}

func FuzzParseContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-99/100", "bytes */5", "bytes 1-2/*", "bytes -1--2/3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		start, end, total, ok := parseContentRange(s)
		if ok && (start < 0 || end < start || (total >= 0 && end >= total)) {
			t.Errorf("parseContentRange(%q) accepted %d-%d/%d", s, start, end, total)
		}
	})
}
