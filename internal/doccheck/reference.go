package doccheck

import (
	"fmt"
	"strings"

	"github.com/configmap-attacher/configmap-attacher/internal/cli"
)

// Reference renders docs/reference.md: every command and every flag of its flag set, as the binary
// declares them.
func Reference(cmds []cli.CommandReference) string {
	var b strings.Builder
	b.WriteString(`# Command-line reference

<!-- Generated from the binary's own flag sets by ` + "`make docs`" + ` (go run ./hack/docs -write); do not edit.
` + "`make test-docs`" + ` fails when this page and the binary disagree. -->

Every command of ` + "`configmap-attacher`" + ` and every flag it takes. ` + "`configmap-attacher CMD -h`" + ` prints the
same, with examples; a flag may be written with one dash or two. Exit codes everywhere: 0 done (including nothing
to do), 1 failed, 2 bad usage. Environment: ` + "`LOG_LEVEL`" + ` (debug, info, warn, error, fatal, panic),
` + "`LOG_FORMAT`" + ` (json or text), ` + "`IS_IN_CLUSTER`" + ` (false: use a kubeconfig), ` + "`VERSION`" + ` (logged for audit),
and for the controller ` + "`POD_NAMESPACE`" + ` (the leader Lease's namespace).

| command | what it does |
| --- | --- |
`)
	for _, c := range cmds {
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s |\n", c.Name, c.Name, cell(c.Summary))
	}
	for _, c := range cmds {
		fmt.Fprintf(&b, "\n## %s\n\n%s.\n", c.Name, upper(c.Summary))
		if usage := usageLines(c.Synopsis); usage != "" {
			fmt.Fprintf(&b, "\n```\n%s\n```\n", usage)
		}
		if len(c.Flags) == 0 {
			b.WriteString("\nNo flags.\n")
			continue
		}
		b.WriteString("\n| flag | default | |\n| --- | --- | --- |\n")
		for _, f := range c.Flags {
			name := "-" + f.Name
			if f.Arg != "" {
				name += " " + f.Arg
			}
			def := ""
			if f.Default != "" {
				def = "`" + f.Default + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", cell(name), cell(def), cell(f.Usage))
		}
	}
	return b.String()
}

// usageLines is the "Usage:" paragraph of a synopsis, without its heading.
func usageLines(synopsis string) string {
	_, rest, ok := strings.Cut(synopsis, "Usage:\n")
	if !ok {
		return ""
	}
	para, _, _ := strings.Cut(rest, "\n\n")
	var lines []string
	for _, l := range strings.Split(para, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "  "))
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n")
}

// cell makes text safe in a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

func upper(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
