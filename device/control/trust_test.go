package control

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/otad/otad/ota"
)

// trustHandler answers root updates with fixed versions and error.
type trustHandler struct {
	countingHandler
	from, to uint64
	err      error
}

func (h *trustHandler) UpdateRoot(context.Context, [][]byte) (uint64, uint64, error) {
	return h.from, h.to, h.err
}

// TestUpdateRootVersions: through a daemon, a refused root update still
// says which version the device keeps (otad trust update prints it,
// docs/contract/trust.md), as an accepted one says both.
func TestUpdateRootVersions(t *testing.T) {
	tests := []struct {
		name     string
		from, to uint64
		err      error
		code     ota.Code
	}{
		{name: "accepted", from: 1, to: 3},
		{name: "refused", from: 2, to: 2, err: ota.Errorf(ota.CodeRootVersion, "version 2 is not newer"), code: ota.CodeRootVersion},
		{name: "failed", from: 4, to: 4, err: os.ErrPermission},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "otad-control")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			path := filepath.Join(dir, "otad.sock")
			srv, err := Listen(path, &trustHandler{from: tc.from, to: tc.to, err: tc.err}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			go srv.Serve(t.Context())
			u, err := Client{Path: path}.UpdateRoot(t.Context(), [][]byte{[]byte("{}")})
			if (err != nil) != (tc.err != nil) || ota.CodeOf(err) != tc.code {
				t.Fatalf("err %v (code %q), want %v (code %q)", err, ota.CodeOf(err), tc.err, tc.code)
			}
			if u.From != tc.from || u.To != tc.to {
				t.Errorf("versions %d to %d, want %d to %d", u.From, u.To, tc.from, tc.to)
			}
		})
	}
}
