package statelock

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

func TestExclusive(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	// flock is per open file description: a second Acquire collides even in one process.
	if _, err := Acquire(dir); !errors.Is(err, ErrBusy) {
		t.Fatalf("second acquire: %v, want ErrBusy", err)
	}
	// And another process (flock(1)) cannot take it either.
	if _, err := exec.LookPath("flock"); err == nil {
		if err := exec.Command("flock", "-n", dir+"/lock", "true").Run(); err == nil {
			t.Fatal("flock(1) took a held lock")
		}
	}
	l.Release()
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	l2.Release()
	if _, err := os.Stat(dir + "/lock"); err != nil {
		t.Fatal(err)
	}
}
