// Command docs checks the user docs against the code (internal/doccheck) and, with -write,
// regenerates the flag reference (docs/reference.md). `make test-docs` runs the check, `make docs`
// regenerates; the charts' READMEs come from helm-docs (-helm-docs names it).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/configmap-attacher/configmap-attacher/internal/cli"
	"github.com/configmap-attacher/configmap-attacher/internal/doccheck"
)

func main() {
	root := flag.String("root", ".", "the repository")
	write := flag.Bool("write", false, "write docs/reference.md instead of checking")
	helmDocs := flag.String("helm-docs", "", "helm-docs binary: compare each chart's README.md with what it generates (empty: skip)")
	flag.Parse()
	if err := run(*root, *write, *helmDocs); err != nil {
		fmt.Fprintln(os.Stderr, "docs:", err)
		os.Exit(1)
	}
}

func run(root string, write bool, helmDocs string) error {
	cmds, err := cli.Reference()
	if err != nil {
		return err
	}
	if write {
		if helmDocs != "" {
			charts, err := filepath.Glob(filepath.Join(root, "charts", "*", "Chart.yaml"))
			if err != nil {
				return err
			}
			for _, c := range charts {
				cmd := exec.Command(helmDocs, helmDocsArgs(filepath.Dir(c), false)...)
				cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
				if err := cmd.Run(); err != nil {
					return fmt.Errorf("helm-docs %s: %w", filepath.Dir(c), err)
				}
			}
		}
		return os.WriteFile(filepath.Join(root, doccheck.ReferencePath), []byte(doccheck.Reference(cmds)), 0o644)
	}
	in := doccheck.Inputs{Root: root, Commands: cmds}
	if helmDocs != "" {
		in.ChartREADMEs = func(dir string) (string, error) { return chartREADME(helmDocs, dir) }
	}
	problems, err := doccheck.Check(in)
	if err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d problems in the docs", len(problems))
	}
	return nil
}

// helmDocsArgs generate one chart's README.md from its README.md.gotmpl and values.yaml: every value,
// in values.yaml's order (the docs check refuses a row without a description: helm-docs' strict mode
// counts only its older "# key -- " comments), with no helm-docs version in the page (a tool upgrade
// alone does not make it stale).
func helmDocsArgs(chartDir string, dryRun bool) []string {
	args := []string{"--chart-search-root", chartDir, "--skip-version-footer",
		"--sort-values-order", "file", "--log-level", "warning"}
	if dryRun {
		args = append(args, "--dry-run")
	}
	return args
}

// chartREADME is what `make docs` writes as a chart's README.md (helm-docs --dry-run prints it).
func chartREADME(helmDocs, dir string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command(helmDocs, helmDocsArgs(dir, true)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm-docs %s: %w: %s", dir, err, errb.String())
	}
	if out.Len() == 0 {
		// helm-docs skips a chart it cannot document (a template that does not render) with a
		// warning, and exits 0.
		msg := errb.String()
		if _, after, ok := strings.Cut(msg, "msg="); ok {
			msg = after
		}
		msg = strings.ReplaceAll(strings.Trim(strings.TrimSpace(msg), `"`), `\n`, " ")
		return "", fmt.Errorf("helm-docs generated nothing: %s", msg)
	}
	return out.String(), nil
}
