package policy

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
)

// A namespace's tables, planned. The namespace's table (TableName) holds every revision while it fits
// in maxBytes. Beyond, workloads (routes) are split off, the largest first, into shards: tables
// pins-1, pins-2, ... each holding the revisions of as many workloads as fit (first fit, near
// maxBytes), until the namespace's table fits; the namespace's table names, for each workload split
// off, its shard (spec.split). A few shards, not one table per workload: kube-apiserver evaluates the
// policies once per table of the namespace for every pod. A workload once split off stays in its
// shard while it has revisions (no moving back and forth); a shard outgrowing maxBytes moves its
// largest workloads to another shard with room, or a new one. A workload alone in its shard that
// outgrows it keeps the entries it has and gets no new one: those revisions are reported (Overflow),
// never dropped silently, and the gate refuses their pods, naming what they wait for.
//
// | facts | step |
// | --- | --- |
// | the entries fit in the namespace's table | one table |
// | they do not | split off the largest workload into the first shard with room (a new shard if none), again until they fit |
// | a shard does not fit | move its largest workload to another shard with room (or a new one), while it holds more than one |
// | a split-off workload has no revision left | it leaves its shard; a shard left empty is deleted |
// | a workload alone in its shard does not fit | keep its entries, refuse the new ones (Overflow) |
//
// The writes come in the order that never leaves a revision without an entry in some table: the
// tables a workload moves to are written before the tables it moves from (between the two, both hold
// its entries), and tables are deleted last. The policies do not care which table holds an entry.

// Desired is what the tables should say: every entry, and the route of each; Split, when not nil, the
// shard each workload was split off into (else the namespace's table says).
type Desired struct {
	Entries map[string]Entry
	Routes  map[string]string
	Split   map[string]string
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

// specOverhead bounds what a spec adds to its entries' entrySize: {"revisions":{...}}.
const specOverhead = 32

// plan computes the writes taking the namespace's tables from current (by name) to d.
func plan(ns string, current map[string]*Table, d Desired, maxBytes int) Plan {
	byRoute := map[string][]string{}
	routeBytes := map[string]int{}
	for key, e := range d.Entries {
		route := d.Routes[key]
		byRoute[route] = append(byRoute[route], key)
		routeBytes[route] += entrySize(key, e)
	}
	split := map[string]string{} // route -> shard
	was := d.Split
	if main, ok := current[TableName]; ok && was == nil {
		was = main.Spec.Split
	}
	for route, name := range was {
		if len(byRoute[route]) > 0 {
			split[route] = name
		}
	}
	shardBytes := func(name string) int {
		n := specOverhead
		for route, s := range split {
			if s == name {
				n += routeBytes[route]
			}
		}
		return n
	}
	routesOf := func(name string) []string {
		var out []string
		for route, s := range split {
			if s == name {
				out = append(out, route)
			}
		}
		// largest first; by name among equals
		slices.SortFunc(out, func(a, b string) int {
			if routeBytes[a] != routeBytes[b] {
				return routeBytes[b] - routeBytes[a]
			}
			return strings.Compare(a, b)
		})
		return out
	}
	shards := func() []string { return slices.Sorted(maps.Keys(setOf(slices.Collect(maps.Values(split))))) }
	sources := map[string]bool{} // shards a workload moves out of
	newShard := func() string {
		used := setOf(slices.Collect(maps.Keys(current)))
		for _, s := range split {
			used[s] = struct{}{}
		}
		for i := 1; ; i++ {
			if name := fmt.Sprintf("%s-%d", TableName, i); !has(used, name) {
				return name
			}
		}
	}
	// room is the first shard (not one a workload moves out of, not except) that takes bytes more.
	room := func(bytes int, except string) string {
		for _, name := range shards() {
			if name != except && !sources[name] && shardBytes(name)+bytes <= maxBytes {
				return name
			}
		}
		return newShard()
	}
	for _, name := range shards() {
		for routes := routesOf(name); shardBytes(name) > maxBytes && len(routes) > 1; routes = routesOf(name) {
			sources[name] = true
			split[routes[0]] = room(routeBytes[routes[0]], name)
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
		split[route] = room(routeBytes[route], "")
		spec = mainSpec()
	}

	var p Plan
	var gain, lose, after []Write
	for _, name := range shards() {
		s := TableSpec{Revisions: map[string]Entry{}}
		var keys []string
		for _, route := range routesOf(name) {
			keys = append(keys, byRoute[route]...)
		}
		slices.Sort(keys)
		for _, key := range keys {
			s.Revisions[key] = d.Entries[key]
		}
		if s.size() > maxBytes {
			s, p.Overflow = fit(s, current, keys, maxBytes, p.Overflow)
		}
		if w, ok := write(ns, name, current[name], s); ok {
			if sources[name] {
				lose = append(lose, w)
			} else {
				gain = append(gain, w)
			}
		}
	}
	// A spec whose every entry is new still has to fit: what does not, waits.
	if spec.size() > maxBytes {
		keys := slices.Sorted(maps.Keys(spec.Revisions))
		spec, p.Overflow = fit(spec, current, keys, maxBytes, p.Overflow)
	}
	if len(spec.Revisions) == 0 {
		spec.Revisions = nil
	}
	main, ok := write(ns, TableName, current[TableName], spec)
	live := setOf(shards())
	for name, t := range current {
		if name != TableName && !has(live, name) && isOurs(t.Labels) {
			after = append(after, Write{Op: "delete", Table: t})
		}
	}
	sort.Slice(after, func(i, j int) bool { return after[i].Table.Name < after[j].Table.Name })
	p.Writes = append(p.Writes, gain...)
	if ok {
		p.Writes = append(p.Writes, main)
	}
	p.Writes = append(p.Writes, lose...)
	p.Writes = append(p.Writes, after...)
	sort.Strings(p.Overflow)
	return p
}

func setOf(s []string) map[string]struct{} {
	m := make(map[string]struct{}, len(s))
	for _, v := range s {
		m[v] = struct{}{}
	}
	return m
}

func has(m map[string]struct{}, k string) bool {
	_, ok := m[k]
	return ok
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

// fit drops from s the entries that no current table holds yet, last key first, until s fits; the
// dropped keys join overflow. Entries a table holds already are never dropped.
func fit(s TableSpec, current map[string]*Table, keys []string, maxBytes int, overflow []string) (TableSpec, []string) {
	held := func(key string) bool {
		for _, t := range current {
			if _, ok := t.Spec.Revisions[key]; ok {
				return true
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
