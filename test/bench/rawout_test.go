package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A scenario's raw output is what it printed, replacing the previous run's.
func TestTeeStdoutWritesWhatTheScenarioPrints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks", "job.txt")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("the previous run's figures, longer than this one's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	restore, err := teeStdout(path)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("p50 90 ms")
	fmt.Printf("p99 %d ms\n", 1300)
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "p50 90 ms\np99 1300 ms\n"; string(got) != want {
		t.Fatalf("raw output %q, want %q", got, want)
	}
}
