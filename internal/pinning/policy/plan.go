package policy

import (
	"maps"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/api/equality"
)

// A namespace's tables, planned. The namespace's table (TableName) holds every revision while it fits
// in maxBytes. Beyond, workloads are split off, the largest first, each into a table of its own
// (TableFor its route), until the namespace's fits; a workload once split off stays so while it has
// revisions (no moving back and forth). A workload whose own table would outgrow maxBytes keeps the
// entries it has and gets no new one: those revisions are reported (Overflow), never dropped silently,
// and the ValidatingAdmissionPolicy refuses their pods, naming what they wait for.
//
// | facts | step |
// | --- | --- |
// | the entries fit in the namespace's table | one table |
// | they do not | split off the largest workload, again until they fit |
// | a split-off workload has no revision left | back to the namespace's table; its table deleted |
// | a split-off workload's table would not fit | keep its entries, refuse the new ones (Overflow) |
//
// The writes come in the order that never leaves a pod's revision unanswered: tables split off are
// written before the namespace's table stops answering for them (between the two, both hold the
// entries), and deleted only after.

// Desired is what the tables should say: every entry, and the route of each.
type Desired struct {
	Entries map[string]Entry
	Routes  map[string]string
}

// Write is one API write of a table.
type Write struct {
	Op    string // "create", "update" or "delete"
	Table *Table
}

// Plan is the writes, in order, and the revisions (keys) that could not be given an entry.
type Plan struct {
	Writes   []Write
	Overflow []string
}

// plan computes the writes taking the namespace's tables from current (by name) to d.
func plan(ns string, current map[string]*Table, d Desired, maxBytes int) Plan {
	byRoute := map[string][]string{}
	for key := range d.Entries {
		byRoute[d.Routes[key]] = append(byRoute[d.Routes[key]], key)
	}
	split := map[string]string{}
	if main, ok := current[TableName]; ok {
		for route, name := range main.Spec.Split {
			if len(byRoute[route]) > 0 {
				split[route] = name
			}
		}
	}
	mainSpec := func() TableSpec {
		s := TableSpec{Revisions: map[string]Entry{}}
		for key, e := range d.Entries {
			if _, off := split[d.Routes[key]]; !off {
				s.Revisions[key] = e
			}
		}
		if len(split) > 0 {
			s.Split = maps.Clone(split)
		}
		return s
	}
	spec := mainSpec()
	for spec.size() > maxBytes {
		route, ok := largestRoute(spec, d)
		if !ok {
			break
		}
		split[route] = TableFor(route)
		spec = mainSpec()
	}

	var p Plan
	var before, after []Write
	for _, route := range slices.Sorted(maps.Keys(split)) {
		name := split[route]
		s := TableSpec{Route: route, Revisions: map[string]Entry{}}
		keys := slices.Sorted(slices.Values(byRoute[route]))
		for _, key := range keys {
			s.Revisions[key] = d.Entries[key]
		}
		if s.size() > maxBytes {
			s, p.Overflow = fit(s, current[name], current[TableName], keys, maxBytes, p.Overflow)
		}
		if w, ok := write(ns, name, current[name], s); ok {
			before = append(before, w)
		}
	}
	// A spec whose every entry is new still has to fit: what does not, waits.
	if spec.size() > maxBytes {
		keys := slices.Sorted(maps.Keys(spec.Revisions))
		spec, p.Overflow = fit(spec, current[TableName], nil, keys, maxBytes, p.Overflow)
	}
	if len(spec.Revisions) == 0 {
		spec.Revisions = nil
	}
	main, ok := write(ns, TableName, current[TableName], spec)
	for name, t := range current {
		if name != TableName && !slices.Contains(slices.Collect(maps.Values(split)), name) && isOurs(t.Labels) {
			after = append(after, Write{Op: "delete", Table: t})
		}
	}
	sort.Slice(after, func(i, j int) bool { return after[i].Table.Name < after[j].Table.Name })
	p.Writes = append(p.Writes, before...)
	if ok {
		p.Writes = append(p.Writes, main)
	}
	p.Writes = append(p.Writes, after...)
	sort.Strings(p.Overflow)
	return p
}

// largestRoute is the route with the most bytes of entries in spec, if any.
func largestRoute(spec TableSpec, d Desired) (string, bool) {
	bytes := map[string]int{}
	for key, e := range spec.Revisions {
		bytes[d.Routes[key]] += entrySize(key, e)
	}
	best, most := "", -1
	for _, route := range slices.Sorted(maps.Keys(bytes)) {
		if bytes[route] > most {
			best, most = route, bytes[route]
		}
	}
	return best, most >= 0
}

// fit drops from s the entries that no table holds yet (neither cur nor was), last key first, until s
// fits; the dropped keys join overflow. Entries a table holds already are never dropped.
func fit(s TableSpec, cur, was *Table, keys []string, maxBytes int, overflow []string) (TableSpec, []string) {
	held := func(key string) bool {
		for _, t := range []*Table{cur, was} {
			if t != nil {
				if _, ok := t.Spec.Revisions[key]; ok {
					return true
				}
			}
		}
		return false
	}
	for i := len(keys) - 1; i >= 0 && s.size() > maxBytes; i-- {
		if !held(keys[i]) {
			delete(s.Revisions, keys[i])
			overflow = append(overflow, keys[i])
		}
	}
	return s, overflow
}

// write is the write that makes table name say s, if one is needed.
func write(ns, name string, cur *Table, s TableSpec) (Write, bool) {
	switch {
	case cur == nil:
		return Write{Op: "create", Table: newTable(ns, name, s)}, true
	case equality.Semantic.DeepEqual(normalized(cur.Spec), normalized(s)) && isOurs(cur.Labels):
		return Write{}, false
	}
	t := newTable(ns, name, s)
	t.ResourceVersion = cur.ResourceVersion
	t.UID = cur.UID
	return Write{Op: "update", Table: t}, true
}

// normalized treats empty and absent maps alike.
func normalized(s TableSpec) TableSpec {
	if len(s.Split) == 0 {
		s.Split = nil
	}
	if len(s.Revisions) == 0 {
		s.Revisions = nil
	}
	return s
}
