package operator

import (
	"strings"
	"testing"

	"github.com/otad/otad/internal/testkit/signer"
	"github.com/otad/otad/ota"
	"github.com/otad/otad/verify"
)

// Issue 27: publish warns by the ending: a final one never starts again
// (sign again), a retryable one starts again with --retry (no warning then).
func TestAlreadyEndedByEnding(t *testing.T) {
	s, _ := signer.Trusted(t)
	env, err := s.Sign(signer.Offer{ID: "rel-2", Version: "2", Compatible: "acme,pc", URL: "file:///x", Size: 4096, SHA256: strings.Repeat("a", 64)})
	if err != nil {
		t.Fatal(err)
	}
	digest := verify.EnvelopeDigest(env)
	ended := func(code ota.Code, retryable bool) map[string]ota.Status {
		return map[string]ota.Status{"pc-1": {LastResult: &ota.Outcome{ID: "rel-2", ManifestSHA256: digest, Result: ota.ResultFailed, Code: code, Retryable: retryable}}}
	}
	tests := []struct {
		name     string
		statuses map[string]ota.Status
		retry    bool
		want     []string // what the one warning says; none: no warning
	}{
		{name: "final, publish", statuses: ended(ota.CodeHashMismatch, false), want: []string{"ended for good on 1 of the 1", "sign the image again"}},
		{name: "final, publish --retry", statuses: ended(ota.CodeHashMismatch, false), retry: true, want: []string{"ended for good", "sign the image again"}},
		{name: "retryable, publish", statuses: ended(ota.CodeDownloadFailed, true), want: []string{"ended retryable on 1 of the 1 target devices heard of (pc-1: failed/download_failed)", "otactl publish --retry"}},
		{name: "retryable, publish --retry", statuses: ended(ota.CodeDownloadFailed, true), retry: true},
		{name: "another offer's ending", statuses: map[string]ota.Status{"pc-1": {LastResult: &ota.Outcome{ID: "rel-1", ManifestSHA256: strings.Repeat("b", 64), Result: ota.ResultFailed}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := alreadyEnded(env, tc.statuses, tc.retry)
			if (len(tc.want) == 0) != (len(got) == 0) || len(got) > 1 {
				t.Fatalf("warnings %q, want one holding %q", got, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("warning %q lacks %q", got[0], w)
				}
			}
			if tc.statuses["pc-1"].LastResult.Retryable && len(got) == 1 && strings.Contains(got[0], "sign the image again") {
				t.Errorf("warning %q: a retryable ending needs no new signature", got[0])
			}
		})
	}
}
