package history_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/history"
	"github.com/configmap-attacher/configmap-attacher/internal/history/historytest"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

func TestHistoryRows(t *testing.T) {
	type row struct {
		revision int64
		role     workload.Role
		config   string // name plus flags: !exists, ~not attached, ?optional
	}
	flags := func(c history.Config) string {
		s := c.Name
		if !c.Exists {
			s += "!"
		}
		if c.Exists && !c.Attached {
			s += "~"
		}
		if c.Optional {
			s += "?"
		}
		return s
	}
	tests := []struct {
		name    string
		fixture historytest.Fixture
		want    []row
	}{
		{"canary: roles from the Rollout's status", historytest.Canary(), []row{
			{3, workload.RoleCanary, "demo-cm-3849201934"},
			{2, workload.RoleStable, "demo-cm-1203412345"},
			{1, workload.RoleOld, "demo-cm-2648648036"}}},
		{"promoted: the current revision is the stable one", historytest.Promoted(), []row{
			{3, workload.RoleStable, "demo-cm-3849201934"},
			{2, workload.RoleOld, "demo-cm-1203412345"},
			{1, workload.RoleOld, "demo-cm-2648648036"}}},
		{"missing objects, optional ones apart", historytest.Missing(), []row{
			{3, workload.RoleCanary, "demo-cm-3849201934 demo-flags-1a2b3c4d5e!? db-creds~ demo-env-0d1e2f3a4b~"},
			{2, workload.RoleStable, "demo-cm-1203412345!"},
			{1, workload.RoleOld, "demo-cm-2648648036!"}}},
		{"deployment: current by template", historytest.Deployment(), []row{
			{2, workload.RoleCurrent, "web-config-9f8e7d6c5b"},
			{1, workload.RoleOld, "web-config-0a1b2c3d4e"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.fixture.History()
			if len(h.Revisions) != len(tt.want) {
				t.Fatalf("%d revisions, want %d", len(h.Revisions), len(tt.want))
			}
			for i, want := range tt.want {
				r := h.Revisions[i]
				var cfg []string
				for _, c := range r.Config {
					cfg = append(cfg, flags(c))
				}
				if r.Revision != want.revision || r.Role != want.role {
					t.Errorf("row %d = revision %d %s, want %d %s", i, r.Revision, r.Role, want.revision, want.role)
				}
				for _, name := range strings.Fields(want.config) {
					if !strings.Contains(" "+strings.Join(cfg, " ")+" ", " "+name+" ") {
						t.Errorf("row %d config %v lacks %s", i, cfg, name)
					}
				}
			}
		})
	}
}

func TestOriginalName(t *testing.T) {
	annotated := historytest.ConfigMap(historytest.Meta("demo-env-0d1e2f3a4b", "demo-env", true), nil)
	tests := []struct {
		o    *history.Object
		name string
		want string
	}{
		{annotated, "demo-env-0d1e2f3a4b", "demo-env"},
		{nil, "demo-cm-2648648036", "demo-cm"},   // the original chart: adler32 in decimal
		{nil, "demo-env-0d1e2f3a4b", "demo-env"}, // the renderer's hash, object gone
		{nil, "demo-cm-v2", "demo-cm-v2"},
		{nil, "app-config", "app-config"},
		{nil, "db-creds", "db-creds"},
		{nil, "kube-root-ca.crt", "kube-root-ca.crt"},
		{nil, "app-config-Abc123", "app-config-Abc123"},
		{nil, "x-1234567", "x"},
	}
	for _, tt := range tests {
		if got := history.OriginalName(tt.o, tt.name); got != tt.want {
			t.Errorf("history.OriginalName(%s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestSelect(t *testing.T) {
	tests := []struct {
		name      string
		fixture   historytest.Fixture
		revisions []int64
		from, to  int64
		err       error
	}{
		{name: "canary in progress: stable against canary", fixture: historytest.Canary(), from: 2, to: 3},
		{name: "aborted canary: stable against canary", fixture: historytest.Aborted(), from: 2, to: 3},
		{name: "promoted: previous against current", fixture: historytest.Promoted(), from: 2, to: 3},
		{name: "deployment: previous against current", fixture: historytest.Deployment(), from: 1, to: 2},
		{name: "one revision: against current", fixture: historytest.Canary(), revisions: []int64{1}, from: 1, to: 3},
		{name: "two revisions, in the order given", fixture: historytest.Canary(), revisions: []int64{3, 1}, from: 3, to: 1},
		{name: "unknown revision", fixture: historytest.Canary(), revisions: []int64{7}, err: history.ErrUnknownRevision},
		{name: "unknown second revision", fixture: historytest.Canary(), revisions: []int64{1, 9}, err: history.ErrUnknownRevision},
		{name: "a single revision", fixture: historytest.Single(), err: history.ErrNothingToCompare},
		{name: "no current ReplicaSet", fixture: historytest.NoCurrent(), err: history.ErrNoCurrentRevision},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, to, err := history.Select(tt.fixture.History(), tt.revisions)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				t.Logf("error reads: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if from.Revision != tt.from || to.Revision != tt.to {
				t.Errorf("selected %d -> %d, want %d -> %d", from.Revision, to.Revision, tt.from, tt.to)
			}
		})
	}
}

func TestSelectErrorNamesTheRevisions(t *testing.T) {
	_, _, err := history.Select(historytest.Canary().History(), []int64{7})
	want := "Rollout devops-apps-01/demo has no revision 7 (revisions: 3 canary, 2 stable, 1): no such revision"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
}

func TestComparePairsByOriginalName(t *testing.T) {
	f := historytest.Reshaped()
	h := f.History()
	from, to, _ := history.Select(h, []int64{1, 2})
	c := history.Compare(h, from, to, f.Objs)
	var got []string
	for _, p := range c.Pairs {
		s := string(p.Kind) + "/" + p.OriginalName + ":"
		for _, m := range []*history.Member{p.From, p.To} {
			if m == nil {
				s += " -"
			} else {
				s += " " + m.Name
			}
		}
		got = append(got, s)
	}
	want := []string{
		"ConfigMap/shop-assets: shop-assets-2222222222 shop-assets-aaaaaaaaa1",
		"ConfigMap/shop-legacy: shop-legacy-1111111111 -",
		"ConfigMap/shop-new: - shop-new-bbbbbbbbb2",
		"ConfigMap/shop-same: shop-same-3333333333 shop-same-ccccccccc3",
		"Secret/shop-api: - shop-api-eeeeeeeee5",
		"Secret/shop-tls: shop-tls-5555555555 shop-tls-ddddddddd4",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("pairs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// single is a Rollout with one revision.

func TestPinnedRevisionsReadTheirSnapshots(t *testing.T) {
	f := historytest.Pinned()
	h := f.History()
	// revision -> "kind/name=snapshot" for each pinned object; "" snapshot means not pinned yet
	want := map[int64]string{
		3: "ConfigMap/app-config=" + historytest.SnapshotName(pinnedConfigMap(historytest.AppConfigFaulty)) + " Secret/app-env=app-env-adcf92bbc6",
		2: "ConfigMap/app-config=" + historytest.SnapshotName(pinnedConfigMap(historytest.AppConfigV1)) + " Secret/app-env=app-env-adcf92bbc6",
		1: "ConfigMap/app-config= Secret/app-env=",
	}
	for _, r := range h.Revisions {
		var got []string
		for _, c := range r.Config {
			if c.Pinned {
				got = append(got, string(c.Kind)+"/"+c.Name+"="+c.Snapshot)
			} else if c.Snapshot != "" {
				t.Errorf("revision %d: %s is not pinned but has snapshot %s", r.Revision, c.Name, c.Snapshot)
			}
		}
		if s := strings.Join(got, " "); s != want[r.Revision] {
			t.Errorf("revision %d pins %q, want %q", r.Revision, s, want[r.Revision])
		}
	}
	if got := history.SnapshotRefs(&h.Revisions[0], &h.Revisions[1]); len(got) != 3 {
		t.Errorf("SnapshotRefs = %v, want the two app-config snapshots and the shared app-env one", got)
	}
}

// A snapshot being deleted (held while its pods run) is not a revision's pin when the revision has
// another: the webhook gives new pods that one (caches.PinAmong), so history names it too.
func TestAPinBeingDeletedIsNotTheRevisionsPin(t *testing.T) {
	f := historytest.Pinned()
	rs2 := f.Res.Owned[1]
	no := false
	// The fixture's snapshots carry no creation time: this one would win api.EarlierPin by its name.
	older := metav1.ObjectMeta{Name: "app-config-0000000000", Namespace: rs2.Namespace, DeletionTimestamp: &metav1.Time{Time: historytest.Now},
		Labels:          map[string]string{api.RevisionedLabel: api.RevisionedValue, api.SnapshotLabel: api.SnapshotValue},
		Annotations:     map[string]string{api.OriginalNameAnnotation: "app-config"},
		Finalizers:      []string{api.InUseFinalizer},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs2.Name, UID: rs2.UID, Controller: &no}}}
	f.Objs.Add(historytest.ConfigMap(older, historytest.AppConfigFaulty))
	want := historytest.SnapshotName(pinnedConfigMap(historytest.AppConfigV1))
	for _, r := range f.History().Revisions {
		if r.Revision != 2 {
			continue
		}
		for _, c := range r.Config {
			if c.Name == "app-config" && c.Snapshot != want {
				t.Errorf("revision 2 reads %q, want %s (the pin not being deleted)", c.Snapshot, want)
			}
		}
	}
}

func pinnedConfigMap(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config"}, Data: data}
}

func TestDrift(t *testing.T) {
	faulty := historytest.SnapshotName(pinnedConfigMap(historytest.AppConfigFaulty))
	tests := []struct {
		name    string
		fixture historytest.Fixture
		want    []history.Drift
	}{
		{"changed in place without a template change", historytest.Pinned(), []history.Drift{{
			Kind: refs.ConfigMap, Name: "app-config", Revision: 3, Snapshot: faulty,
			Live: historytest.SnapshotName(pinnedConfigMap(historytest.AppConfigFixed))}}},
		{"set back to an older revision's content", historytest.PinnedReverted(), []history.Drift{{
			Kind: refs.ConfigMap, Name: "app-config", Revision: 3, Snapshot: faulty,
			Live: historytest.SnapshotName(pinnedConfigMap(historytest.AppConfigV1)), LiveRevisions: []int64{2}}}},
		{"in sync", historytest.PinnedInSync(), nil},
		{"no pinning", historytest.Canary(), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.fixture.History().Drift; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("drift = %+v\nwant    %+v", got, tt.want)
			}
		})
	}
	t.Run("not read: no drift claimed", func(t *testing.T) {
		f := historytest.Pinned()
		f.Objs[refs.Ref{Kind: refs.ConfigMap, Name: "app-config"}].LiveSnapshot = ""
		if d := f.History().Drift; d != nil {
			t.Errorf("drift %+v without the live content's name", d)
		}
	})
	t.Run("promoted: measured against the new stable revision", func(t *testing.T) {
		f := historytest.PinnedInSync()
		f.Res.Rollout.Status.StableRS = "6d5f8b7c9"
		if d := f.History().Drift; d != nil {
			t.Errorf("drift %+v, but app-config holds revision 3's content", d)
		}
	})
}

func TestDriftRefsAreOnlyTheCurrentRevisionsPins(t *testing.T) {
	got := history.DriftRefs(historytest.Pinned().History())
	want := []refs.Ref{{Kind: refs.ConfigMap, Name: "app-config"}, {Kind: refs.Secret, Name: "app-env"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DriftRefs = %v, want %v (db-creds is not pinned: never read with content)", got, want)
	}
	if got := history.DriftRefs(historytest.Canary().History()); got != nil {
		t.Errorf("DriftRefs without pinning = %v", got)
	}
	if got := history.PinnedKinds(historytest.Pinned().Objs); !reflect.DeepEqual(got, []refs.Kind{refs.ConfigMap, refs.Secret}) {
		t.Errorf("PinnedKinds = %v", got)
	}
	if got := history.PinnedKinds(historytest.Canary().Objs); got != nil {
		t.Errorf("PinnedKinds without pinning = %v", got)
	}
}

func TestComparePairsPinnedSnapshots(t *testing.T) {
	f := historytest.Pinned()
	h := f.History()
	describe := func(c *history.Comparison) string {
		var out []string
		for _, p := range c.Pairs {
			s := string(p.Kind) + "/" + p.OriginalName + ":"
			for _, m := range []*history.Member{p.From, p.To} {
				switch {
				case m.Snapshot():
					s += " snapshot " + m.Name
				case m.Pinned != "":
					s += " live " + m.Name
				default:
					s += " " + m.Name
				}
				if m.Object == nil {
					s += "!"
				}
			}
			out = append(out, s)
		}
		return strings.Join(out, "\n")
	}
	v1 := historytest.SnapshotName(pinnedConfigMap(historytest.AppConfigV1))
	faulty := historytest.SnapshotName(pinnedConfigMap(historytest.AppConfigFaulty))
	tests := []struct {
		name      string
		live      bool
		revisions []int64
		want      string
	}{
		{name: "stable against canary: their snapshots", want: "ConfigMap/app-config: snapshot " + v1 + " snapshot " + faulty +
			"\nSecret/app-env: snapshot app-env-adcf92bbc6 snapshot app-env-adcf92bbc6\nSecret/db-creds: db-creds db-creds"},
		{name: "a revision without a snapshot reads the object", revisions: []int64{1, 3}, want: "ConfigMap/app-config: live app-config snapshot " + faulty +
			"\nSecret/app-env: live app-env snapshot app-env-adcf92bbc6\nSecret/db-creds: db-creds db-creds"},
		{name: "live: the current revision against the objects now", live: true, want: "ConfigMap/app-config: snapshot " + faulty + " live app-config" +
			"\nSecret/app-env: snapshot app-env-adcf92bbc6 live app-env\nSecret/db-creds: db-creds db-creds"},
		{name: "live from revision 2", live: true, revisions: []int64{2}, want: "ConfigMap/app-config: snapshot " + v1 + " live app-config" +
			"\nSecret/app-env: snapshot app-env-adcf92bbc6 live app-env\nSecret/db-creds: db-creds db-creds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pick := history.Select
			if tt.live {
				pick = history.SelectLive
			}
			from, to, err := pick(h, tt.revisions)
			if err != nil {
				t.Fatal(err)
			}
			if tt.live && (to.Role != history.RoleLive || to.ReplicaSet != "") {
				t.Errorf("live side = %+v", to)
			}
			if got := describe(history.Compare(h, from, to, f.Objs)); got != tt.want {
				t.Errorf("pairs:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
	// The live side must not change the history it was derived from.
	if h.Revisions[0].Config[0].Snapshot != faulty {
		t.Errorf("SelectLive changed the current revision: %+v", h.Revisions[0].Config[0])
	}
}

func TestSelectLive(t *testing.T) {
	if _, _, err := history.SelectLive(historytest.NoCurrent().History(), nil); !errors.Is(err, history.ErrNoCurrentRevision) {
		t.Errorf("no current revision: err = %v", err)
	}
	if _, _, err := history.SelectLive(historytest.Pinned().History(), []int64{9}); !errors.Is(err, history.ErrUnknownRevision) {
		t.Errorf("unknown revision: err = %v", err)
	}
	if _, _, err := history.SelectLive(historytest.Pinned().History(), []int64{1, 2}); err == nil {
		t.Error("two revisions and live: no error")
	}
}
