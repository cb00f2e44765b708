package trigger

import (
	"maps"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
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
		{"a newly followed object edited before it could be read: a change", settled(facts{origin: acked, live: c(cm, "v1", sec, "s2"), acked: c(cm, "v1"),
			made: c(cm, "v1"), startsFrom: c(sec, unknownContent)}), start, c(cm, "v1", sec, "s2"), []string{sec}},
		{"a newly followed object changed back to what it held as the follow began: nothing", settled(facts{origin: acked, live: c(cm, "v1", sec, "s1"),
			acked: c(cm, "v1"), made: c(cm, "v1"), startsFrom: c(sec, "s1")}), nothing, c(cm, "v1", sec, "s1"), nil},
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
		{"first sight, its newest carrying a value of ours for other content (a lost record): M counts", settled(facts{origin: firstSight, lostRecord: true,
			live: c(cm, "v3"), made: c(cm, unknownContent)}), start, c(cm, "v3"), []string{cm}},
		{"settling, held back less than the maximum wait: wait, at most until it", facts{origin: acked, live: c(cm, "v2"), acked: c(cm, "v1"), made: c(cm, "v1"),
			quiet: time.Second, settle: 2 * time.Second, held: 19500 * time.Millisecond, maxWait: 20 * time.Second}, wait, c(cm, "v1"), []string{cm}},
		{"settling, held back for the maximum wait: start with the content of now", facts{origin: acked, live: c(cm, "v2"), acked: c(cm, "v1"), made: c(cm, "v1"),
			quiet: time.Second, settle: 2 * time.Second, held: 20 * time.Second, maxWait: 20 * time.Second}, start, c(cm, "v2"), []string{cm}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decide(tc.f)
			if got.verdict != tc.verdict || !maps.Equal(got.acked, tc.acked) || !slices.Equal(got.changed, tc.changed) {
				t.Errorf("decide = verdict %v, acked %v, changed %v; want %v, %v, %v", got.verdict, got.acked, got.changed, tc.verdict, tc.acked, tc.changed)
			}
			if timedOut := tc.f.held >= tc.f.maxWait && tc.f.quiet < tc.f.settle; got.timedOut != timedOut {
				t.Errorf("decide: timed out %v, want %v", got.timedOut, timedOut)
			}
			if got.verdict == wait && got.settling && got.after != min(tc.f.settle-tc.f.quiet, tc.f.maxWait-tc.f.held) {
				t.Errorf("decide: wait %s", got.after)
			}
		})
	}
}

// rev is a revision: its name, uid uid-<name>, number, and the minute it was created.
func rev(name string, number int64, minute int) *caches.User {
	return &caches.User{Name: name, UID: types.UID("uid-" + name), Number: number,
		CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, minute, 0, 0, time.UTC))}
}

// Table 1, origin, row by row.
func TestClassify(t *testing.T) {
	withHash := func(u *caches.User, v string) *caches.User {
		u.TemplateAnnotations = map[string]string{api.ConfigHashAnnotation: v}
		return u
	}
	rec := func(ack string, wr *wrote, known ...string) *record {
		r := newRecord()
		r.Acknowledged.Revision, r.Acknowledged.Wrote = types.UID(ack), wr
		for _, k := range known {
			r.Revisions[types.UID(k)] = map[string]string{}
		}
		return r
	}
	ours := &wrote{Value: "58c69207a7.225dd3", Set: true, After: 1}
	tmplWith := withHash(&caches.User{}, ours.Value)
	for _, tc := range []struct {
		name   string
		f      classFacts
		origin origin
		change ackChange
	}{
		{"our write made the newest", classFacts{rec: rec("uid-r1", ours), revs: []*caches.User{withHash(rev("r2", 2, 2), ours.Value), rev("r1", 1, 1)}, tmpl: tmplWith},
			byUs, ackKept},
		{"our write made a revision, a newer one since: resolved, made since", classFacts{rec: rec("uid-r1", ours),
			revs: []*caches.User{rev("r3", 3, 3), withHash(rev("r2", 2, 2), ours.Value), rev("r1", 1, 1)}, tmpl: &caches.User{}}, madeSince, ackResolved},
		{"our write on the template, no revision yet", classFacts{rec: rec("uid-r1", ours), revs: []*caches.User{rev("r1", 1, 1)}, tmpl: tmplWith, waited: time.Second},
			pending, ackKept},
		{"our write waited a minute: undone", classFacts{rec: rec("uid-r1", ours), revs: []*caches.User{rev("r1", 1, 1)}, tmpl: tmplWith, waited: pendingPatience},
			older, ackDropped},
		{"our write waited a minute, paused: pending still", classFacts{rec: rec("uid-r1", ours), revs: []*caches.User{rev("r1", 1, 1)}, tmpl: tmplWith,
			waited: time.Hour, paused: true}, pending, ackKept},
		{"our write off the template (undone)", classFacts{rec: rec("uid-r1", ours), revs: []*caches.User{rev("r1", 1, 1)}, tmpl: &caches.User{}}, older, ackDropped},
		{"another revision instead of ours", classFacts{rec: rec("uid-r1", ours), revs: []*caches.User{rev("r2", 2, 2), rev("r1", 1, 1)}, tmpl: &caches.User{}},
			madeSince, ackDropped},
		{"nothing acknowledged", classFacts{rec: rec("", nil), revs: []*caches.User{rev("r1", 1, 1)}, tmpl: &caches.User{}}, firstSight, ackKept},
		{"the acknowledged one", classFacts{rec: rec("uid-r1", nil), revs: []*caches.User{rev("r1", 1, 1)}, tmpl: &caches.User{}}, acked, ackKept},
		{"the record knows the newest: an older again", classFacts{rec: rec("uid-r2", nil, "uid-r1"), revs: []*caches.User{rev("r1", 3, 1), rev("r2", 2, 2)},
			tmpl: &caches.User{}}, older, ackKept},
		{"the newest created before the acknowledged one", classFacts{rec: rec("uid-r2", nil), revs: []*caches.User{rev("r1", 3, 1), rev("r2", 2, 2)},
			tmpl: &caches.User{}}, older, ackKept},
		{"made since the acknowledged one", classFacts{rec: rec("uid-r1", nil), revs: []*caches.User{rev("r2", 2, 2), rev("r1", 1, 1)}, tmpl: &caches.User{}},
			madeSince, ackKept},
		{"the acknowledged one pruned", classFacts{rec: rec("uid-r0", nil), revs: []*caches.User{rev("r2", 2, 2), rev("r1", 1, 1)}, tmpl: &caches.User{}},
			madeSince, ackKept},
		{"the acknowledged one pruned, the newest's snapshots say other content", classFacts{rec: rec("uid-r0", nil),
			revs: []*caches.User{rev("r2", 2, 2), rev("r1", 1, 1)}, tmpl: &caches.User{}, prunedDiffers: true}, older, ackKept},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := tc.f.rec.encode()
			o, ch := classify(tc.f)
			if o != tc.origin || ch != tc.change {
				t.Errorf("classify = %s, %d; want %s, %d", o, ch, tc.origin, tc.change)
			}
			if after, _ := tc.f.rec.encode(); after != before {
				t.Errorf("classify changed the record: %s, was %s", after, before)
			}
		})
	}
}

// Table 2, appearance (S), row by row.
func TestSeenAt(t *testing.T) {
	const live, then = "1111111111", "2222222222"
	noted := func(a appearanceFacts) *appearanceFacts { return &a }
	for _, tc := range []struct {
		name      string
		o         objectFacts
		valueFits bool
		want      string
	}{
		{"noted: not followed then", objectFacts{live: live, appearance: noted(appearanceFacts{})}, false, live},
		{"noted: at the same version", objectFacts{live: live, appearance: noted(appearanceFacts{followed: true, rv: "5", sameVersion: true})}, false, live},
		{"noted: its version written before the revision", objectFacts{live: live, appearance: noted(appearanceFacts{followed: true, rv: "5", writtenBefore: true})}, false, live},
		{"noted: an optional object that did not exist", objectFacts{live: live, optional: true, appearance: noted(appearanceFacts{followed: true})}, false, absentContent},
		{"noted: the version then hashed", objectFacts{live: live, appearance: noted(appearanceFacts{followed: true, rv: "5", earlier: then, earlierKnown: true})}, false, then},
		{"noted: the version then never hashed", objectFacts{live: live, appearance: noted(appearanceFacts{followed: true, rv: "5"})}, false, unknownContent},
		{"away: holds the acknowledged content", objectFacts{live: live, acknowledged: true, unchanged: true}, false, live},
		{"away: a value of ours written for L", objectFacts{live: live, acknowledged: true}, true, live},
		{"away: newly followed, not written after the revision", objectFacts{live: live}, false, live},
		{"away: newly followed, written after the revision", objectFacts{live: live, afterRevision: true}, false, unknownContent},
		{"away: changed since acknowledged, order unknown", objectFacts{live: live, acknowledged: true}, false, unknownContent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := seenAt(tc.o, tc.valueFits); got != tc.want {
				t.Errorf("seenAt = %q, want %q", got, tc.want)
			}
		})
	}
}

// Table 3, made with (M), row by row.
func TestMadeWith(t *testing.T) {
	const cm = "ConfigMap/app-config"
	ack := map[string]string{cm: "aaaaaaaaaa"}
	for _, tc := range []struct {
		name string
		o    objectFacts
		from origin
		want string
		ok   bool
	}{
		{"the record's entry first", objectFacts{key: cm, recorded: "rrrrrrrrrr", hasRecorded: true, snapshot: "ssssssssss", hasSnapshot: true}, madeSince, "rrrrrrrrrr", true},
		{"our write, not pinned: what we wrote it for", objectFacts{key: cm, snapshot: "ssssssssss", hasSnapshot: true}, byUs, "aaaaaaaaaa", true},
		{"our write, pinned, its snapshot missing: what we wrote it for", objectFacts{key: cm, pinned: true}, byUs, "aaaaaaaaaa", true},
		{"our write, pinned: its snapshot", objectFacts{key: cm, pinned: true, snapshot: "ssssssssss", hasSnapshot: true}, byUs, "ssssssssss", true},
		{"its snapshot", objectFacts{key: cm, snapshot: "ssssssssss", hasSnapshot: true}, madeSince, "ssssssssss", true},
		{"first sight: S", objectFacts{key: cm}, firstSight, "Sssssssss", true},
		{"made since: S", objectFacts{key: cm}, madeSince, "Sssssssss", true},
		{"an older again: S", objectFacts{key: cm}, older, "Sssssssss", true},
		{"acknowledged: not known", objectFacts{key: cm}, acked, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := madeWith(tc.o, tc.from, ack, "Sssssssss")
			if got != tc.want || ok != tc.ok {
				t.Errorf("madeWith = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// The settle clock and the maximum wait, row by row.
func TestTheSettleClock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := func(kv ...string) map[string]string {
		out := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	t.Run("tickClock", func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			prev      clock
			live      map[string]string
			edited    bool
			wantSince time.Time
			wantMove  map[string]int
		}{
			{"the first look, no event seen: quiet a long time", clock{}, c("a", "1"), false, time.Time{}, nil},
			{"the first look after an event", clock{}, c("a", "1"), true, t0, nil},
			{"content other than the last look's", clock{live: c("a", "1"), quietSince: t0.Add(-time.Hour)}, c("a", "2"), true, t0, nil},
			{"the same content: unchanged", clock{live: c("a", "1"), quietSince: t0.Add(-time.Hour)}, c("a", "1"), true, t0.Add(-time.Hour), nil},
			{"a change while held: counted as moving", clock{live: c("a", "1", "b", "1"), heldSince: t0.Add(-time.Minute), moving: map[string]int{"b": 2}},
				c("a", "1", "b", "2"), true, t0, map[string]int{"b": 3}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got := tickClock(tc.prev, tc.live, t0, tc.edited)
				if !got.quietSince.Equal(tc.wantSince) || !maps.Equal(got.moving, tc.wantMove) || !maps.Equal(got.live, tc.live) {
					t.Errorf("tickClock = since %s, moving %v, live %v; want %s, %v, %v", got.quietSince, got.moving, got.live, tc.wantSince, tc.wantMove, tc.live)
				}
			})
		}
	})
	t.Run("holdSince", func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			c        clock
			settling bool
			want     time.Time
		}{
			{"held from the change's event", clock{quietSince: t0.Add(-3 * time.Second)}, true, t0.Add(-3 * time.Second)},
			{"held since before: unchanged", clock{quietSince: t0, heldSince: t0.Add(-time.Minute)}, true, t0.Add(-time.Minute)},
			{"no event known: from now", clock{}, true, t0},
			{"released by any other step", clock{heldSince: t0.Add(-time.Minute), moving: map[string]int{"b": 1}}, false, time.Time{}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got := holdSince(tc.c, tc.settling, t0)
				if !got.heldSince.Equal(tc.want) || (!tc.settling && got.moving != nil) {
					t.Errorf("holdSince = %s (moving %v), want %s", got.heldSince, got.moving, tc.want)
				}
			})
		}
	})
	t.Run("snapshotWait", func(t *testing.T) {
		for _, tc := range []struct {
			name         string
			missing      bool
			waited       time.Duration
			wait, gaveUp bool
			after        time.Duration
			maxWait      time.Duration
		}{
			{"nothing missing: go on", false, 0, false, false, 0, 20 * time.Second},
			{"missing: wait for it", true, 5 * time.Second, true, false, waitAgain, 20 * time.Second},
			{"missing, the bound near: wait the rest", true, 19500 * time.Millisecond, true, false, 500 * time.Millisecond, 20 * time.Second},
			{"missing past the bound: decide without it, told", true, 20 * time.Second, false, true, 0, 20 * time.Second},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wait, after, gaveUp := snapshotWait(tc.missing, tc.waited, tc.maxWait)
				if wait != tc.wait || after != tc.after || gaveUp != tc.gaveUp {
					t.Errorf("snapshotWait = %v, %s, %v; want %v, %s, %v", wait, after, gaveUp, tc.wait, tc.after, tc.gaveUp)
				}
			})
		}
	})
}

// Table 4, ownership, and the values of ours that prove themselves.
func TestOwnership(t *testing.T) {
	values := map[string]bool{"58c69207a7": true} // a value written before values carried their check
	for _, tc := range []struct {
		name             string
		owners           []string
		has              bool
		value            string
		takeBack, refuse bool
	}{
		{"owned by no other manager: write", nil, true, "pinned-by-hand", false, false},
		{"another's, a value of ours by its check", []string{"kubectl-rollout"}, true, "58c69207a7.225dd3", true, false},
		{"another's, a value of ours the record holds", []string{"kubectl-rollout"}, true, "58c69207a7", true, false},
		{"another's, a suffixed value of ours", []string{"kubectl-rollout"}, true, "58c69207a7-2.6a9b0a", true, false},
		{"another's, a value by hand", []string{"kubectl-edit"}, true, "pinned-by-hand", false, true},
		{"another's, a check that does not match", []string{"kubectl-edit"}, true, "58c69207a7.000000", false, true},
		{"another's, owning no value", []string{"kubectl-edit"}, false, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			takeBack, refuse := ownership(tc.owners, tc.has, tc.value, values)
			if takeBack != tc.takeBack || refuse != tc.refuse {
				t.Errorf("ownership = %v, %v; want %v, %v", takeBack, refuse, tc.takeBack, tc.refuse)
			}
		})
	}
}

// The values we write prove themselves; by hand (value.go):
//
//	printf '%s' 'configmap-attacher.io/config-hash:58c69207a7' | sha256sum | cut -c1-6     # 225dd3
//	printf '%s' 'configmap-attacher.io/config-hash:58c69207a7-2' | sha256sum | cut -c1-6   # 6a9b0a
func TestValuesProveThemselves(t *testing.T) {
	if v := valueOf("58c69207a7", 1); v != "58c69207a7.225dd3" {
		t.Errorf("valueOf = %q, want 58c69207a7.225dd3", v)
	}
	if v := valueOf("58c69207a7", 2); v != "58c69207a7-2.6a9b0a" {
		t.Errorf("valueOf(2) = %q, want 58c69207a7-2.6a9b0a", v)
	}
	values := map[string]bool{"25f47d58c1": true}
	for _, tc := range []struct {
		v       string
		proves  bool
		content string // the content hash it was written for, when it proves itself
		fits    bool   // writtenFor 58c69207a7
	}{
		{"58c69207a7.225dd3", true, "58c69207a7", true},
		{"58c69207a7-2.6a9b0a", true, "58c69207a7", true},
		{"58c69207a7.225dd4", false, "", false},
		{"58c69207a7", false, "", false},
		{"25f47d58c1", false, "", false},
		{"pinned-by-hand", false, "", false},
		{"58C69207A7.225dd3", false, "", false},
	} {
		if got := proves(tc.v); got != tc.proves {
			t.Errorf("proves(%q) = %v", tc.v, got)
		}
		if got := contentHashOf(tc.v); got != tc.content {
			t.Errorf("contentHashOf(%q) = %q, want %q", tc.v, got, tc.content)
		}
		if got := writtenFor(tc.v, values, "58c69207a7"); got != tc.fits {
			t.Errorf("writtenFor(%q) = %v, want %v", tc.v, got, tc.fits)
		}
	}
	if !writtenFor("25f47d58c1", values, "25f47d58c1") {
		t.Errorf("a value the record holds, written before the check, is not known as written for its hash")
	}
}
