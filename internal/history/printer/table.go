// Package printer writes what package history models: the history table (or JSON, YAML) and the
// unified diff between two revisions' config.
package printer

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/internal/history"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Output formats of the history command.
const (
	OutputTable = "table"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// Style decides how output looks on the way to a terminal.
type Style struct {
	// Color adds ANSI colors; only for a terminal, never in files or pipes.
	Color bool
}

const (
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiCyan   = "\x1b[36m"
	ansiBold   = "\x1b[1m"
	ansiReset  = "\x1b[0m"
)

func (s Style) paint(code, text string) string {
	if !s.Color || text == "" {
		return text
	}
	return code + text + ansiReset
}

// Write prints h in format (table, json or yaml); now is the reference for ages.
func Write(w io.Writer, h *history.History, format string, now time.Time, style Style) error {
	switch format {
	case OutputTable, "":
		return WriteTable(w, h, now, style)
	case OutputJSON:
		b, err := json.MarshalIndent(h, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case OutputYAML:
		b, err := yaml.Marshal(h)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("unknown output format %q: use table, json or yaml", format)
}

// WriteTable prints one row per revision, one line per config object; CONFIG comes last because an
// entry may span lines (color codes there cannot upset the alignment either).
func WriteTable(out io.Writer, h *history.History, now time.Time, style Style) error {
	w := &errWriter{w: out}
	if len(h.Revisions) == 0 {
		_, err := fmt.Fprintf(w, "No ReplicaSets found for %s %s/%s.\n", h.Workload.Kind, h.Workload.Namespace, h.Workload.Name)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tREPLICASET\tROLE\tPODS\tAGE\tCONFIG")
	var warnings []string
	markers := map[string]bool{}
	for _, r := range h.Revisions {
		role := string(r.Role)
		if r.Role == workload.RoleCanary && h.Workload.Aborted {
			role += " (aborted)"
		}
		cells := []string{revisionString(r.Revision), r.ReplicaSet, role, fmt.Sprintf("%d/%d", r.Pods.Ready, r.Pods.Desired), age(r, now)}
		if len(r.Config) == 0 {
			fmt.Fprintln(tw, strings.Join(append(cells, "<none>"), "\t"))
			continue
		}
		for i, c := range r.Config {
			if i > 0 {
				cells = []string{"", "", "", "", ""}
			}
			cell, marker := configCell(c, style)
			fmt.Fprintln(tw, strings.Join(append(cells, cell), "\t"))
			markers[marker] = true
			if c.Missing() {
				warnings = append(warnings, missingWarning(r, c))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	legend := false
	for _, l := range legends {
		if markers[l[0]] {
			if !legend {
				fmt.Fprintln(w)
				legend = true
			}
			fmt.Fprintf(w, "%-20s %s\n", l[0], l[1])
		}
	}
	if len(h.Drift) > 0 {
		fmt.Fprintln(w)
	}
	for _, d := range h.Drift {
		fmt.Fprintln(w, style.paint(ansiYellow, driftNote(d)))
	}
	if len(warnings) > 0 {
		fmt.Fprintln(w)
	}
	for _, m := range warnings {
		fmt.Fprintln(w, style.paint(ansiRed, m))
	}
	return w.err
}

// Markers after a config object's name, and what they mean (printed under the table when used).
const (
	markerMissing       = "(MISSING)"
	markerOptional      = "(missing, optional)"
	markerNotAttached   = "(not attached)"
	markerNotRevisioned = "(not revisioned)"
	markerHeld          = "(deleting, held)"
	markerDeleting      = "(deleting)"
	markerPinned        = "(pinned)"
	markerNotPinned     = "(not pinned yet)"
)

var legends = [][2]string{
	{markerHeld, "deleted, but in-use protection keeps it while anything uses it (the revisions listing it, their pods): it goes once nothing does."},
	{markerDeleting, "deleted, and nothing holds it: it goes any moment."},
	{markerNotAttached, "no ownerReference to that ReplicaSet: its lifetime is not tied to the revision."},
	{markerNotRevisioned, "a plain shared object: a change to it reaches every revision at once."},
	{markerOptional, "referenced as optional: pods start without it."},
	{markerPinned, "pods of the revision read the snapshot after the arrow, the immutable copy it owns, not the object."},
	{markerNotPinned, "labelled for pinning, but the revision owns no snapshot: its pods read the object as it is now."},
}

// configCell shows the object as kubectl names it (configmap/x), so it can be pasted into kubectl,
// with the marker that applies, if any. An attached object needs none: that is the normal case.
func configCell(c history.Config, style Style) (cell, marker string) {
	s := kubectlName(c.Kind, c.Name)
	switch {
	case c.Missing():
		return style.paint(ansiRed, s+" "+markerMissing), markerMissing
	case !c.Exists:
		return s + " " + markerOptional, markerOptional
	case c.Held:
		return style.paint(ansiYellow, s+" "+markerHeld), markerHeld
	case c.Deleting:
		return style.paint(ansiRed, s+" "+markerDeleting), markerDeleting
	case c.Pinned && c.Snapshot != "":
		return s + " -> " + c.Snapshot + " " + markerPinned, markerPinned
	case c.Pinned:
		return style.paint(ansiYellow, s+" "+markerNotPinned), markerNotPinned
	case c.Attached:
		return s, ""
	case c.Revisioned:
		return style.paint(ansiYellow, s+" "+markerNotAttached), markerNotAttached
	}
	return s + " " + markerNotRevisioned, markerNotRevisioned
}

// driftNote says what a pinned object changed in place means: nothing runs the change yet.
func driftNote(d history.Drift) string {
	obj := kubectlName(d.Kind, d.Name)
	const pods = "Pods keep their snapshots until the pod template changes (checksum annotation)."
	if len(d.LiveRevisions) > 0 {
		return fmt.Sprintf("DRIFT: %s holds revision %s's content (%s), not the current revision %s's (%s). %s",
			obj, revisionString(d.LiveRevisions[0]), d.Live, revisionString(d.Revision), d.Snapshot, pods)
	}
	return fmt.Sprintf("DRIFT: %s has changed since revision %s was created: no revision runs its content yet (it would be snapshot %s; revision %s's pods read %s). %s",
		obj, revisionString(d.Revision), d.Live, revisionString(d.Revision), d.Snapshot, pods)
}

func missingWarning(r history.Revision, c history.Config) string {
	what := fmt.Sprintf("%s %s", c.Kind, c.Name)
	if r.Pods.Desired > 0 {
		return fmt.Sprintf("WARNING: revision %s (ReplicaSet %s, %d pods) needs %s, which does not exist: any of its pods that restarts or is rescheduled will fail to start.",
			revisionString(r.Revision), r.ReplicaSet, r.Pods.Desired, what)
	}
	return fmt.Sprintf("WARNING: revision %s (ReplicaSet %s) needs %s, which does not exist: a rollback to this revision would fail.",
		revisionString(r.Revision), r.ReplicaSet, what)
}

func revisionString(n int64) string {
	if n == 0 {
		return "?"
	}
	return fmt.Sprint(n)
}

func age(r history.Revision, now time.Time) string {
	if r.CreationTimestamp.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(r.CreationTimestamp.Time))
}
