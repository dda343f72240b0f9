package grub

import (
	"maps"
	"os"
	"testing"
)

func TestFixture(t *testing.T) {
	buf, err := os.ReadFile("../../testdata/env/grubenv")
	if err != nil {
		t.Fatal(err)
	}
	if len(buf) != BlockSize {
		t.Fatalf("fixture is %d bytes", len(buf))
	}
	got, err := ParseEnv(buf)
	want := map[string]string{"ORDER": "A B", "A_OK": "1", "A_TRY": "0", "B_OK": "0", "B_TRY": "0"}
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("%v %v, want %v", got, err, want)
	}
	if st := grubState(got); st.Primary() != "A" || st.Slots["B"].Bootable {
		t.Fatalf("state %+v", st)
	}
}
