package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// CommandReference is one command as its own code declares it: what `configmap-attacher CMD -h` prints.
type CommandReference struct {
	Name    string
	Summary string
	// Synopsis is the text -h prints before the flags.
	Synopsis string
	Flags    []FlagReference
}

// FlagReference is one flag of a command's flag set.
type FlagReference struct {
	Name string
	// Arg is the flag's value word as -h shows it (string, duration, `NAME`...); empty for a boolean.
	Arg     string
	Default string
	Usage   string
}

// Reference returns every command with the flags of its flag set, read by running it with -h in an
// environment of its own (no variables: defaults are the binary's, not this machine's). The docs'
// flag reference is generated from it and the docs check names no flag it lacks, so neither can
// drift from the binary.
func Reference() ([]CommandReference, error) {
	var out []CommandReference
	for _, c := range commands() {
		var stdout bytes.Buffer
		var fs *flag.FlagSet
		env := Env{
			Args: []string{c.name, "-h"}, Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: io.Discard,
			Lookup:  func(string) (string, bool) { return "", false },
			flagSet: func(f *flag.FlagSet) { fs = f },
		}
		err := c.run(context.Background(), env, []string{"-h"})
		ref := CommandReference{Name: c.name, Summary: c.summary}
		if fs == nil {
			// A command without flags (version) ran: it has no -h of its own.
			out = append(out, ref)
			continue
		}
		if !errors.Is(err, flag.ErrHelp) {
			return nil, fmt.Errorf("%s -h: want the usage, got %v", c.name, err)
		}
		ref.Synopsis, _, _ = strings.Cut(stdout.String(), "\nFlags (-flag and --flag are the same):")
		fs.VisitAll(func(f *flag.Flag) {
			arg, usage := flag.UnquoteUsage(f)
			if isBool(f) {
				arg = ""
			}
			ref.Flags = append(ref.Flags, FlagReference{Name: f.Name, Arg: arg, Default: f.DefValue, Usage: usage})
		})
		out = append(out, ref)
	}
	return out, nil
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
