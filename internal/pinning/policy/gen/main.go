// Command gen writes the chart's files generated from internal/pinning/policy: the PinTable CRD and
// the admission policies' CEL (from internal/refs' table). Run from the repository's root:
//
//	go run ./internal/pinning/policy/gen
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/configmap-attacher/configmap-attacher/internal/pinning/policy"
)

func main() {
	files, err := policy.ChartFiles()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for path, b := range files {
		if err := os.WriteFile(filepath.Join("charts", "configmap-attacher", path), b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
