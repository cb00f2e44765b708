package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// scenarios are the families of figures docs/benchmarks.md records, one raw output each.
var scenarios = []string{"job", "controller", "memory", "webhook", "reloader", "scale", "policy-scale", "uninstall"}

// teeStdout copies everything the scenario prints to path as well, the family's raw output, which
// the next run of the scenario overwrites (git keeps the earlier ones). restore waits until the copy
// is complete and puts stdout back.
func teeStdout(path string) (restore func() error, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	stdout := os.Stdout
	os.Stdout = w
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.MultiWriter(stdout, f), r)
		done <- err
	}()
	return func() error {
		os.Stdout = stdout
		w.Close()
		err := <-done
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		fmt.Fprintf(os.Stderr, "raw output: %s\n", path)
		return nil
	}, nil
}
