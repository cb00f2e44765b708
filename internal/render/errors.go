package render

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors, so callers and tests can tell what kind of input was refused.
var (
	// ErrInvalidYAML: the input does not parse, or uses YAML that Kubernetes clients refuse
	// (duplicate keys, self-referencing anchors).
	ErrInvalidYAML = errors.New("invalid YAML")
	// ErrNotObject: a document is not a Kubernetes object (no kind or no metadata.name).
	ErrNotObject = errors.New("not a Kubernetes object")
	// ErrInvalidObject: an object the renderer must read is malformed (bad name, data that is not
	// strings, Secret data that is not base64, a pod spec that does not decode).
	ErrInvalidObject = errors.New("invalid object")
	// ErrDuplicate: two objects would claim the same kind, namespace and name.
	ErrDuplicate = errors.New("duplicate object")
	// ErrUnreferencedRename: renaming an opted-in object would leave a reference to its old name (a
	// user that follows no revision, or a namespace the renderer cannot tell).
	ErrUnreferencedRename = errors.New("a reference would be left behind")
	// ErrLookup: the chart reads an opted-in object back with Helm's lookup by name, which finds
	// nothing once it is renamed (see lookup.go).
	ErrLookup = errors.New("the chart looks it up by name")
	// ErrUnsafe: the renderer could not prove its output means the input plus the intended changes,
	// so it writes nothing rather than something subtly different.
	ErrUnsafe = errors.New("cannot rewrite safely")
)

// DocError locates a problem in the input: the source, the 1-based document index, and for List
// items the 1-based item index, which is what a user can find in `helm template` output.
type DocError struct {
	Source string
	Doc    int
	Items  []int
	Line   int
	Object string
	Err    error
}

func (e *DocError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: document %d", e.Source, e.Doc)
	for _, i := range e.Items {
		fmt.Fprintf(&b, " item %d", i)
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	if e.Object != "" {
		fmt.Fprintf(&b, ", %s", e.Object)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *DocError) Unwrap() error { return e.Err }

// kindError joins a sentinel with a specific message, so errors.Is finds the sentinel and the user
// reads the specifics.
func kindError(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %w", sentinel, fmt.Errorf(format, args...))
}
