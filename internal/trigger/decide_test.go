package trigger

import (
	"maps"
	"slices"
	"testing"
	"time"
)

// decide's table, row by row (its comment and docs/config-starts.md): facts in, one step out.
func TestDecide(t *testing.T) {
	const cm, sec = "ConfigMap/app-config", "Secret/db-creds"
	c := func(kv ...string) map[string]string {
		out := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	settled := func(f facts) facts { f.quiet, f.settle = time.Minute, 2*time.Second; return f }
	for _, tc := range []struct {
		name    string
		f       facts
		verdict verdict
		acked   map[string]string
		changed []string
	}{
		{"pending: wait for its revision", settled(facts{origin: pending, live: c(cm, "v2"), acked: c(cm, "v1")}),
			wait, c(cm, "v1"), nil},
		{"pending, paused, no change since our write: nothing until it is resumed", settled(facts{origin: pending, paused: true, live: c(cm, "v2"), acked: c(cm, "v2")}),
			nothing, c(cm, "v2"), nil},
		{"pending, paused, a change since our write: write again", settled(facts{origin: pending, paused: true, live: c(cm, "v3"), acked: c(cm, "v2"), made: c(cm, "v3")}),
			start, c(cm, "v3"), []string{cm}},
		{"first sight: opting in starts nothing", settled(facts{origin: firstSight, live: c(cm, "v2"), made: c(cm, "v1")}),
			nothing, c(cm, "v2"), nil},
		{"first sight, an edit seen while it followed: made with counts", settled(facts{origin: firstSight, edited: true, live: c(cm, "v2"), made: c(cm, "v1")}),
			start, c(cm, "v2"), []string{cm}},
		{"acknowledged, L = A: nothing", settled(facts{origin: acked, live: c(cm, "v1"), acked: c(cm, "v1"), made: c(cm, "v1")}),
			nothing, c(cm, "v1"), nil},
		{"acknowledged, L ≠ A, settling: wait the rest of the window", facts{origin: acked, live: c(cm, "v2"), acked: c(cm, "v1"), made: c(cm, "v1"),
			quiet: 500 * time.Millisecond, settle: 2 * time.Second, maxWait: 20 * time.Second}, wait, c(cm, "v1"), []string{cm}},
		{"acknowledged, L ≠ A: start", settled(facts{origin: acked, live: c(cm, "v2"), acked: c(cm, "v1"), made: c(cm, "v1")}),
			start, c(cm, "v2"), []string{cm}},
		{"acknowledged, L ≠ A, the newest made with L (its snapshot): A = L", settled(facts{origin: acked, live: c(cm, "v2"), acked: c(cm, "v1"), made: c(cm, "v2")}),
			nothing, c(cm, "v2"), nil},
		{"a newly followed object starts from L", settled(facts{origin: acked, live: c(cm, "v1", sec, "s1"), acked: c(cm, "v1"), made: c(cm, "v1")}),
			nothing, c(cm, "v1", sec, "s1"), nil},
		{"our write: unchanged, what we wrote it for", settled(facts{origin: byUs, live: c(cm, "v2"), acked: c(cm, "v2"), made: c(cm, "v2")}),
			nothing, c(cm, "v2"), nil},
		{"our write, an edit since: start", settled(facts{origin: byUs, live: c(cm, "v3"), acked: c(cm, "v2"), made: c(cm, "v2")}),
			start, c(cm, "v3"), []string{cm}},
		{"made since with the new content (a deploy together): nothing", settled(facts{origin: madeSince, live: c(cm, "v2", sec, "s2"), acked: c(cm, "v1", sec, "s1"),
			made: c(cm, "v2", sec, "s2"), seen: c(cm, "v2", sec, "s2")}), nothing, c(cm, "v2", sec, "s2"), nil},
		{"made since, an edit after it appeared: start", settled(facts{origin: madeSince, live: c(cm, "v3"), acked: c(cm, "v1"), made: c(cm, "v2"), seen: c(cm, "v2")}),
			start, c(cm, "v3"), []string{cm}},
		{"made since, the version it appeared with not known: errs toward a new revision", settled(facts{origin: madeSince, live: c(cm, "v3"), acked: c(cm, "v1"),
			made: c(cm, unknownContent), seen: c(cm, unknownContent)}), start, c(cm, "v3"), []string{cm}},
		{"an older again, no edit since it came back: told, nothing written", settled(facts{origin: older, live: c(cm, "v3"), acked: c(cm, "v3"), made: c(cm, "v1"), seen: c(cm, "v3")}),
			overruled, c(cm, "v3"), nil},
		{"an older again, made with what the objects hold: nothing to tell", settled(facts{origin: older, live: c(cm, "v1"), acked: c(cm, "v3"), made: c(cm, "v1"), seen: c(cm, "v1")}),
			nothing, c(cm, "v1"), nil},
		{"an older again, an edit since it came back: start", settled(facts{origin: older, live: c(cm, "v4"), acked: c(cm, "v3"), made: c(cm, "v1"), seen: c(cm, "v3")}),
			start, c(cm, "v4"), []string{cm}},
		{"an optional object appeared: a change", settled(facts{origin: acked, live: c(cm, "v1"), acked: c(cm, absentContent), made: c(cm, absentContent)}),
			start, c(cm, "v1"), []string{cm}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decide(tc.f)
			if got.verdict != tc.verdict || !maps.Equal(got.acked, tc.acked) || !slices.Equal(got.changed, tc.changed) {
				t.Errorf("decide = verdict %v, acked %v, changed %v; want %v, %v, %v", got.verdict, got.acked, got.changed, tc.verdict, tc.acked, tc.changed)
			}
		})
	}
}
