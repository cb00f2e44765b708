package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// entries builds n entries of route, each pinning one ConfigMap to a snapshot; keys are route-i.
func entries(d Desired, route string, n int) Desired {
	d = Desired{Entries: maps.Clone(d.Entries), Routes: maps.Clone(d.Routes)}
	if d.Entries == nil {
		d = Desired{Entries: map[string]Entry{}, Routes: map[string]string{}}
	}
	for i := range n {
		key := fmt.Sprintf("%s-%03d", strings.ToLower(strings.ReplaceAll(route, "/", "-")), i)
		d.Entries[key] = Entry{Revision: "ReplicaSet/" + key, ConfigMaps: map[string]string{"app-config": "app-config-0123456789"}}
		d.Routes[key] = route
	}
	return d
}

// tables turns a plan's writes into the tables they leave, starting from current.
func tables(current map[string]*Table, p Plan) map[string]*Table {
	out := maps.Clone(current)
	if out == nil {
		out = map[string]*Table{}
	}
	for _, w := range p.Writes {
		if w.Op == "delete" {
			delete(out, w.Table.Name)
			continue
		}
		out[w.Table.Name] = w.Table
	}
	return out
}

func ops(p Plan) []string {
	var out []string
	for _, w := range p.Writes {
		out = append(out, w.Op+" "+w.Table.Name)
	}
	return out
}

func TestPlan(t *testing.T) {
	one := entries(Desired{}, "ReplicaSet/web", 3)
	entrySize := entrySize("replicaset-web-000", one.Entries["replicaset-web-000"])
	big := entries(entries(Desired{}, "ReplicaSet/web", 10), "StatefulSet/db", 4)
	for _, tc := range []struct {
		name     string
		current  map[string]*Table
		desired  Desired
		maxBytes int
		// want: the writes in order; then per table the number of entries it holds and its route.
		want     []string
		tables   map[string]int
		overflow int
	}{
		{name: "a namespace with no revision gets its empty table", desired: Desired{}, maxBytes: 4096,
			want: []string{"create pins"}, tables: map[string]int{"pins": 0}},
		{name: "entries that fit stay in the namespace's table", desired: one, maxBytes: 4096,
			want: []string{"create pins"}, tables: map[string]int{"pins": 3}},
		{name: "a table already saying so is not written", current: tables(nil, plan("ns", nil, one, 4096)), desired: one, maxBytes: 4096,
			tables: map[string]int{"pins": 3}},
		{name: "beyond the limit the largest workload is split off, written before the namespace's table",
			desired: big, maxBytes: 11*entrySize + 100,
			want: []string{"create " + TableFor("ReplicaSet/web"), "create pins"}, tables: map[string]int{"pins": 4, TableFor("ReplicaSet/web"): 10}},
		{name: "a workload split off stays split off while it has revisions",
			current: tables(nil, plan("ns", nil, big, 11*entrySize+100)), desired: entries(Desired{}, "ReplicaSet/web", 2), maxBytes: 11*entrySize + 100,
			want: []string{"update " + TableFor("ReplicaSet/web"), "update pins"}, tables: map[string]int{"pins": 0, TableFor("ReplicaSet/web"): 2}},
		{name: "a workload with no revision left comes back; its table is deleted after the namespace's stops naming it",
			current: tables(nil, plan("ns", nil, big, 11*entrySize+100)), desired: entries(Desired{}, "StatefulSet/db", 4), maxBytes: 11*entrySize + 100,
			want: []string{"update pins", "delete " + TableFor("ReplicaSet/web")}, tables: map[string]int{"pins": 4}},
		{name: "a workload too large for a table of its own keeps what it holds and gets no new entry",
			desired: entries(Desired{}, "ReplicaSet/web", 10), maxBytes: 6*entrySize + 60,
			want: []string{"create " + TableFor("ReplicaSet/web"), "create pins"}, tables: map[string]int{"pins": 0, TableFor("ReplicaSet/web"): 6}, overflow: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := plan("ns", tc.current, tc.desired, tc.maxBytes)
			if got := ops(p); !slices.Equal(got, tc.want) {
				t.Errorf("writes %v, want %v", got, tc.want)
			}
			after := tables(tc.current, p)
			got := map[string]int{}
			for name, tb := range after {
				got[name] = len(tb.Spec.Revisions)
				if tb.Spec.size() > tc.maxBytes {
					t.Errorf("table %s holds %d bytes, over %d", name, tb.Spec.size(), tc.maxBytes)
				}
				if name != TableName && tb.Spec.Route == "" {
					t.Errorf("table %s split off has no route", name)
				}
			}
			if !maps.Equal(got, tc.tables) {
				t.Errorf("tables %v, want %v", got, tc.tables)
			}
			if len(p.Overflow) != tc.overflow {
				t.Errorf("overflow %v, want %d", p.Overflow, tc.overflow)
			}
			// Every entry is answered for by exactly one table, or reported.
			main := after[TableName]
			for key := range tc.desired.Entries {
				route := tc.desired.Routes[key]
				answering := main
				if name, off := main.Spec.Split[route]; off {
					answering = after[name]
				}
				_, held := answering.Spec.Revisions[key]
				if held == slices.Contains(p.Overflow, key) {
					t.Errorf("entry %s (route %s): held %v, reported %v", key, route, held, slices.Contains(p.Overflow, key))
				}
			}
		})
	}
}

// A table split off is created before the namespace's stops answering for its workload: in between,
// both hold the entries; no revision is ever without its entry.
func TestPlanNeverLeavesARevisionUnanswered(t *testing.T) {
	start := entries(Desired{}, "ReplicaSet/web", 10)
	current := tables(nil, plan("ns", nil, start, 1<<20))
	grown := entries(start, "StatefulSet/db", 4)
	p := plan("ns", current, grown, 10*entrySize("replicaset-web-000", start.Entries["replicaset-web-000"]))
	state := maps.Clone(current)
	for _, w := range p.Writes {
		if w.Op == "delete" {
			delete(state, w.Table.Name)
		} else {
			state[w.Table.Name] = w.Table
		}
		main := state[TableName]
		for key := range start.Entries {
			answering := main
			if name, off := main.Spec.Split["ReplicaSet/web"]; off {
				answering = state[name]
			}
			if answering == nil {
				t.Fatalf("after %s %s: the table answering for %s does not exist", w.Op, w.Table.Name, key)
			}
			if _, ok := answering.Spec.Revisions[key]; !ok {
				t.Fatalf("after %s %s: %s has no entry in %s", w.Op, w.Table.Name, key, answering.Name)
			}
		}
	}
}
