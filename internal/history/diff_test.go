package history

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// goldenKey makes hidden-Secret hashes reproducible; real runs use a random key.
var goldenKey = []byte("golden files only")

func TestDiffGolden(t *testing.T) {
	tests := []struct {
		golden      string
		fixture     fixture
		revisions   []int64
		showSecrets bool
	}{
		{golden: "diff-canary.diff", fixture: canary()}, // the paused canary against stable
		{golden: "diff-canary-show-secrets.diff", fixture: canary(), showSecrets: true},
		{golden: "diff-1-2.diff", fixture: canary(), revisions: []int64{1, 2}},
		{golden: "diff-1-current.diff", fixture: promoted(), revisions: []int64{1}},
		{golden: "diff-garbage-collected.diff", fixture: missing(), revisions: []int64{1, 3}},
		{golden: "diff-no-changes.diff", fixture: canary(), revisions: []int64{3, 3}},
		{golden: "diff-deployment.diff", fixture: deployment()},
		{golden: "diff-reshaped.diff", fixture: reshaped()},
		{golden: "diff-reshaped-show-secrets.diff", fixture: reshaped(), showSecrets: true},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			h := tt.fixture.history()
			from, to, err := Select(h, tt.revisions)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			o := DiffOptions{ShowSecrets: tt.showSecrets, SecretKey: goldenKey, Context: DefaultContext}
			if err := WriteDiff(&b, Compare(h, from, to, tt.fixture.objs), o); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.golden, b.Bytes())
			if !tt.showSecrets {
				for _, v := range []string{"t0k3n", "hunter2", "BEGIN CERTIFICATE"} {
					if strings.Contains(b.String(), v) {
						t.Errorf("a Secret value (%q) is printed without --show-secrets", v)
					}
				}
			}
		})
	}
}

func TestSelect(t *testing.T) {
	tests := []struct {
		name      string
		fixture   fixture
		revisions []int64
		from, to  int64
		err       error
	}{
		{name: "canary in progress: stable against canary", fixture: canary(), from: 2, to: 3},
		{name: "aborted canary: stable against canary", fixture: aborted(), from: 2, to: 3},
		{name: "promoted: previous against current", fixture: promoted(), from: 2, to: 3},
		{name: "deployment: previous against current", fixture: deployment(), from: 1, to: 2},
		{name: "one revision: against current", fixture: canary(), revisions: []int64{1}, from: 1, to: 3},
		{name: "two revisions, in the order given", fixture: canary(), revisions: []int64{3, 1}, from: 3, to: 1},
		{name: "unknown revision", fixture: canary(), revisions: []int64{7}, err: ErrUnknownRevision},
		{name: "unknown second revision", fixture: canary(), revisions: []int64{1, 9}, err: ErrUnknownRevision},
		{name: "a single revision", fixture: single(), err: ErrNothingToCompare},
		{name: "no current ReplicaSet", fixture: noCurrent(), err: ErrNoCurrentRevision},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, to, err := Select(tt.fixture.history(), tt.revisions)
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
	_, _, err := Select(canary().history(), []int64{7})
	want := "Rollout devops-apps-01/demo has no revision 7 (revisions: 3 canary, 2 stable, 1): no such revision"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
}

func TestDiffColorOnlyWhenAsked(t *testing.T) {
	f := canary()
	h := f.history()
	from, to, _ := Select(h, []int64{1, 2})
	var plain, color bytes.Buffer
	c := Compare(h, from, to, f.objs)
	_ = WriteDiff(&plain, c, DiffOptions{SecretKey: goldenKey, Context: 3})
	_ = WriteDiff(&color, c, DiffOptions{SecretKey: goldenKey, Context: 3, Style: Style{Color: true}})
	if strings.Contains(plain.String(), "\x1b[") {
		t.Error("plain diff has color codes")
	}
	if !strings.Contains(color.String(), ansiGreen+`+    "faulty": true`+ansiReset) {
		t.Errorf("added line not green:\n%q", color.String())
	}
}

func TestHiddenSecretHashesDependOnTheKey(t *testing.T) {
	f := canary()
	h := f.history()
	from, to, _ := Select(h, []int64{1, 2})
	c := Compare(h, from, to, f.objs)
	var a, b, random bytes.Buffer
	_ = WriteDiff(&a, c, DiffOptions{SecretKey: []byte("k1")})
	_ = WriteDiff(&b, c, DiffOptions{SecretKey: []byte("k2")})
	_ = WriteDiff(&random, c, DiffOptions{})
	if a.String() == b.String() {
		t.Error("different keys gave the same hashes")
	}
	if !strings.Contains(random.String(), "changed  API_TOKEN  hmac:") {
		t.Errorf("no hidden hash without a key:\n%s", random.String())
	}
}

func TestComparePairsByOriginalName(t *testing.T) {
	f := reshaped()
	h := f.history()
	from, to, _ := Select(h, []int64{1, 2})
	c := Compare(h, from, to, f.objs)
	var got []string
	for _, p := range c.Pairs {
		s := string(p.Kind) + "/" + p.OriginalName + ":"
		for _, m := range []*Member{p.From, p.To} {
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
func single() fixture {
	f := promoted()
	f.res.Owned = f.res.Owned[:1]
	return f
}

// noCurrent is a Rollout whose controller has not reported a stable or current hash yet.
func noCurrent() fixture {
	f := canary()
	f.res.Rollout.Status = workload.RolloutStatus{}
	return f
}
