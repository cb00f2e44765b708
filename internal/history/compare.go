package history

import (
	"errors"
	"fmt"
	"strings"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Errors a user can act on: name other revisions.
var (
	ErrUnknownRevision   = errors.New("no such revision")
	ErrNothingToCompare  = errors.New("nothing to compare")
	ErrNoCurrentRevision = errors.New("no current revision yet")
)

// Comparison is the config of two revisions of a workload, object by object.
type Comparison struct {
	Workload Workload
	From, To Side
	// Pairs are the config objects of both revisions, paired by kind and original name, ordered by
	// kind then original name.
	Pairs []Pair
}

// Side is one revision of a comparison.
type Side struct {
	Revision   int64
	ReplicaSet string
	Role       workload.Role
}

// Pair is one config object across two revisions.
type Pair struct {
	Kind         refs.Kind
	OriginalName string
	// From and To are nil when that revision does not reference the object.
	From, To *Member
}

// Member is the revision of a config object one side references.
type Member struct {
	// Name is the object the side's pods read: the referenced object, or the snapshot of a pinned one.
	Name string
	// Object is nil when the object does not exist (deleted, or garbage-collected with the last
	// ReplicaSet it was attached to).
	Object   *Object
	Optional bool
	// Pinned is set when the pod template references a pinned object: its name. Name is then the
	// revision's snapshot of it, or the pinned object itself when the side reads it live (a revision
	// that owns no snapshot yet, or the live side).
	Pinned string
}

// Snapshot reports whether the member is a pinned object's snapshot (not the object itself).
func (m *Member) Snapshot() bool { return m.Pinned != "" && m.Name != m.Pinned }

// RoleLive is the role of the live side of a comparison: the config objects as they are now, pinned
// ones included, which is what a new revision would be pinned to.
const RoleLive workload.Role = "live"

// Select picks the two revisions to compare from the revision numbers given on the command line:
//   - none: a Rollout's stable revision and its canary while one is in progress, otherwise the
//     revision before the current one and the current one;
//   - one: that revision and the current one;
//   - two: those revisions, in that order.
func Select(h *History, revisions []int64) (from, to *Revision, err error) {
	find := func(n int64) (*Revision, error) {
		for i := range h.Revisions {
			if h.Revisions[i].Revision == n {
				return &h.Revisions[i], nil
			}
		}
		return nil, fmt.Errorf("%s has no revision %d (%s): %w", h.Workload, n, revisionList(h), ErrUnknownRevision)
	}
	switch len(revisions) {
	case 2:
		if from, err = find(revisions[0]); err != nil {
			return nil, nil, err
		}
		to, err = find(revisions[1])
		return from, to, err
	case 1:
		if from, err = find(revisions[0]); err != nil {
			return nil, nil, err
		}
		to, err = current(h)
		return from, to, err
	case 0:
	default:
		return nil, nil, fmt.Errorf("at most two revisions, got %d", len(revisions))
	}
	if to, err = current(h); err != nil {
		return nil, nil, err
	}
	if to.Role == workload.RoleCanary {
		for i := range h.Revisions {
			if h.Revisions[i].Role == workload.RoleStable {
				return &h.Revisions[i], to, nil
			}
		}
	}
	// Revisions are newest first: the previous one is the next lower revision number.
	for i := range h.Revisions {
		if r := &h.Revisions[i]; r.Revision < to.Revision {
			return r, to, nil
		}
	}
	return nil, nil, fmt.Errorf("%s has only revision %d (%s): %w", h.Workload, to.Revision, to.ReplicaSet, ErrNothingToCompare)
}

// SelectLive picks what `diff KIND/NAME [FROM] live` compares: revision FROM (default: the current
// one) with the live side, a revision that references what the current one does but reads pinned
// objects as they are now instead of through snapshots. Without pinning the live side is the current
// revision itself.
func SelectLive(h *History, revisions []int64) (from, to *Revision, err error) {
	cur, err := current(h)
	if err != nil {
		return nil, nil, err
	}
	switch len(revisions) {
	case 0:
		from = cur
	case 1:
		if from, _, err = Select(h, revisions); err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, fmt.Errorf("at most one revision before live, got %d", len(revisions))
	}
	live := Revision{Role: RoleLive, Config: make([]Config, len(cur.Config))}
	for i, c := range cur.Config {
		c.Snapshot = ""
		live.Config[i] = c
	}
	return from, &live, nil
}

// current is the revision the workload's spec asks for: a Rollout's canary (or its stable revision
// once promoted), a Deployment's current ReplicaSet.
func current(h *History) (*Revision, error) {
	for _, role := range []workload.Role{workload.RoleCanary, workload.RoleCurrent, workload.RoleStable} {
		for i := range h.Revisions {
			if h.Revisions[i].Role == role {
				return &h.Revisions[i], nil
			}
		}
	}
	return nil, fmt.Errorf("%s: none of its ReplicaSets (%s) is current: %w (its controller has not caught up; name two revisions)",
		h.Workload, revisionList(h), ErrNoCurrentRevision)
}

// Compare pairs the config objects of two revisions by kind and original name. Revisions of one object
// have different names (their content hash), so names alone would pair nothing. objs holds the objects
// read with their content; the revisions may come from a history built before they were read.
func Compare(h *History, from, to *Revision, objs Objects) *Comparison {
	c := &Comparison{
		Workload: h.Workload,
		From:     Side{Revision: from.Revision, ReplicaSet: from.ReplicaSet, Role: from.Role},
		To:       Side{Revision: to.Revision, ReplicaSet: to.ReplicaSet, Role: to.Role},
	}
	// Objects pair up by kind and original name: the revisions of one logical object.
	group := func(r *Revision) map[refs.Ref][]*Member {
		out := map[refs.Ref][]*Member{}
		for _, cfg := range r.Config {
			m := &Member{Name: cfg.Name, Optional: cfg.Optional}
			m.Object = objs[refs.Ref{Kind: cfg.Kind, Name: cfg.Name}]
			k := refs.Ref{Kind: cfg.Kind, Name: OriginalName(m.Object, cfg.Name)}
			if cfg.Pinned {
				// What the pods read: the revision's snapshot, paired by the pinned object's own
				// name (the snapshots' name annotation), whatever hash-like suffix it may have.
				m.Pinned, k.Name = cfg.Name, cfg.Name
				if cfg.Snapshot != "" {
					m.Name, m.Object = cfg.Snapshot, objs[refs.Ref{Kind: cfg.Kind, Name: cfg.Snapshot}]
				}
			}
			out[k] = append(out[k], m)
		}
		return out
	}
	a, b := group(from), group(to)
	keys := refs.Set{}
	for k := range a {
		keys[k] = struct{}{}
	}
	for k := range b {
		keys[k] = struct{}{}
	}
	for _, k := range keys.Sorted() {
		// Members are in name order (Config is sorted); two revisions of one object in one pod
		// template are rare and paired in that order.
		as, bs := a[k], b[k]
		for i := 0; i < len(as) || i < len(bs); i++ {
			p := Pair{Kind: k.Kind, OriginalName: k.Name}
			if i < len(as) {
				p.From = as[i]
			}
			if i < len(bs) {
				p.To = bs[i]
			}
			c.Pairs = append(c.Pairs, p)
		}
	}
	return c
}

// String names the workload, e.g. "Rollout ns/demo".
func (w Workload) String() string { return fmt.Sprintf("%s %s/%s", w.Kind, w.Namespace, w.Name) }

func revisionList(h *History) string {
	if len(h.Revisions) == 0 {
		return "it has no ReplicaSets"
	}
	s := make([]string, len(h.Revisions))
	for i, r := range h.Revisions {
		s[i] = fmt.Sprint(r.Revision)
		if r.Role != workload.RoleOld {
			s[i] += " " + string(r.Role)
		}
	}
	return "revisions: " + strings.Join(s, ", ")
}
