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
	es := entrySize("replicaset-web-000", one.Entries["replicaset-web-000"])
	big := entries(entries(Desired{}, "ReplicaSet/web", 10), "StatefulSet/db", 4)
	// Four workloads of three revisions, with names of one length (entries of one size).
	four := Desired{}
	for _, r := range []string{"a", "b", "c", "d"} {
		four = entries(four, "ReplicaSet/"+r, 3)
	}
	fs := entrySize("replicaset-a-000", four.Entries["replicaset-a-000"])
	packed := tables(nil, plan("ns", nil, four, 7*fs+specOverhead))
	grownA := entries(four, "ReplicaSet/a", 5)
	for _, tc := range []struct {
		name     string
		current  map[string]*Table
		desired  Desired
		maxBytes int
		// want: the writes in order; then per table the number of entries it holds.
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
		{name: "beyond the limit the largest workload is split off into a shard, written before the namespace's table",
			desired: big, maxBytes: 11*es + 100,
			want: []string{"create pins-1", "create pins"}, tables: map[string]int{"pins": 4, "pins-1": 10}},
		{name: "workloads split off share a shard while it has room",
			desired: four, maxBytes: 7*fs + specOverhead,
			want: []string{"create pins-1", "create pins"}, tables: map[string]int{"pins": 6, "pins-1": 6}},
		{name: "a workload split off stays split off while it has revisions",
			current: tables(nil, plan("ns", nil, big, 11*es+100)), desired: entries(Desired{}, "ReplicaSet/web", 2), maxBytes: 11*es + 100,
			want: []string{"update pins-1", "update pins"}, tables: map[string]int{"pins": 0, "pins-1": 2}},
		{name: "a workload with no revision left leaves its shard; the shard is deleted after the namespace's stops naming it",
			current: tables(nil, plan("ns", nil, big, 11*es+100)), desired: entries(Desired{}, "StatefulSet/db", 4), maxBytes: 11*es + 100,
			want: []string{"update pins", "delete pins-1"}, tables: map[string]int{"pins": 4}},
		{name: "a shard outgrowing the limit moves its largest workload to a new shard, written first",
			current: packed, desired: grownA, maxBytes: 7*fs + specOverhead,
			want: []string{"create pins-2", "update pins", "update pins-1"}, tables: map[string]int{"pins": 6, "pins-1": 3, "pins-2": 5}},
		{name: "a workload too large for a shard of its own keeps what it holds and gets no new entry",
			desired: entries(Desired{}, "ReplicaSet/web", 10), maxBytes: 6*es + 60,
			want: []string{"create pins-1", "create pins"}, tables: map[string]int{"pins": 0, "pins-1": 6}, overflow: 4},
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
			}
			if !maps.Equal(got, tc.tables) {
				t.Errorf("tables %v, want %v", got, tc.tables)
			}
			if len(p.Overflow) != tc.overflow {
				t.Errorf("overflow %v, want %d", p.Overflow, tc.overflow)
			}
			// Every entry is held by exactly one table, the one the namespace's table says, or reported.
			main := after[TableName]
			for key := range tc.desired.Entries {
				route := tc.desired.Routes[key]
				var holders []string
				for name, tb := range after {
					if _, ok := tb.Spec.Revisions[key]; ok {
						holders = append(holders, name)
					}
				}
				want := TableName
				if name, off := main.Spec.Split[route]; off {
					want = name
				}
				reported := slices.Contains(p.Overflow, key)
				if (len(holders) == 0) != reported || (!reported && (len(holders) != 1 || holders[0] != want)) {
					t.Errorf("entry %s (route %s): held by %v, want %s; reported %v", key, route, holders, want, reported)
				}
			}
		})
	}
}

// A table split off is created before the namespace's stops answering for its workload: in between,
// both hold the entries; no revision is ever without its entry.
func TestPlanNeverLeavesARevisionUnanswered(t *testing.T) {
	four := Desired{}
	for _, r := range []string{"a", "b", "c", "d"} {
		four = entries(four, "ReplicaSet/"+r, 3)
	}
	fs := entrySize("replicaset-a-000", four.Entries["replicaset-a-000"])
	for _, tc := range []struct {
		name           string
		start, desired Desired
		before, after  int
	}{
		{"split off", entries(Desired{}, "ReplicaSet/web", 10), entries(entries(Desired{}, "ReplicaSet/web", 10), "StatefulSet/db", 4), 1 << 20,
			10 * entrySize("replicaset-web-000", entries(Desired{}, "ReplicaSet/web", 1).Entries["replicaset-web-000"])},
		{"moved between shards", four, entries(four, "ReplicaSet/a", 5), 7*fs + specOverhead, 7*fs + specOverhead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			current := tables(nil, plan("ns", nil, tc.start, tc.before))
			p := plan("ns", current, tc.desired, tc.after)
			if len(p.Overflow) > 0 {
				t.Fatalf("overflow %v", p.Overflow)
			}
			state := maps.Clone(current)
			for _, w := range p.Writes {
				if w.Op == "delete" {
					delete(state, w.Table.Name)
				} else {
					state[w.Table.Name] = w.Table
				}
				for key := range tc.start.Entries {
					held := false
					for _, tb := range state {
						_, ok := tb.Spec.Revisions[key]
						held = held || ok
					}
					if !held {
						t.Fatalf("after %s %s (writes %v): no table holds %s", w.Op, w.Table.Name, ops(p), key)
					}
				}
			}
		})
	}
}
