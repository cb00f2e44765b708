package main

import (
	"slices"
	"strings"
	"testing"
)

const mi = int64(1) << 20

// step is a builder: a scale step of pods Pods with the machine's memory in use and kube-apiserver's
// RSS, in MiB.
func step(pods int, usedMiB, apiserverMiB int64) scaleStep {
	return scaleStep{pods: pods, used: usedMiB * mi, apiserver: apiserverMiB * mi}
}

func TestMemoryNeedStopsCountingKubeAPIServerAtItsSoftLimit(t *testing.T) {
	// From 10,000 to 50,000 Pods the machine grew by 4,000 MiB, kube-apiserver by 2,000 of them:
	// 0.1 MiB per Pod, 0.05 of it kube-apiserver's. 100,000 Pods more: 10,000 MiB, 5,000 of them
	// kube-apiserver's (from 3,000 MiB, to 8,000 without a limit).
	prev, last := step(10_000, 6_000, 1_000), step(50_000, 10_000, 3_000)
	for _, tc := range []struct {
		name     string
		limitMiB int64
		wantMiB  int64
	}{
		{"no soft limit: all of it", 0, 10_000},
		{"a limit above its growth: all of it", 9_216, 10_000},
		{"a limit it crosses: its growth up to the limit (1,000 of 5,000 MiB)", 4_000, 6_000},
		{"already at its limit: none of its growth", 3_000, 5_000},
		{"already past its limit: none of its growth", 2_500, 5_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := memoryNeed(prev, last, 150_000, tc.limitMiB*mi); got != tc.wantMiB*mi {
				t.Errorf("memoryNeed = %d MiB, want %d MiB", got/mi, tc.wantMiB)
			}
		})
	}
}

func TestMemoryNeedCountsNoShrinkingAPIServerAsRoom(t *testing.T) {
	// kube-apiserver shrank between the steps (a collection at its limit): its negative growth
	// must not be taken off what the rest of the machine needs.
	prev, last := step(10_000, 6_000, 3_200), step(50_000, 10_000, 3_000)
	if got := memoryNeed(prev, last, 150_000, 3_000*mi); got != 10_000*mi {
		t.Errorf("memoryNeed = %d MiB, want 10000 MiB", got/mi)
	}
}

func TestParseMemLimitReadsTheGoRuntimesSuffixes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"9GiB", 9 << 30},
		{"512MiB", 512 << 20},
		{"64KiB", 64 << 10},
		{"1TiB", 1 << 40},
		{"1048576", 1 << 20},
		{"100B", 100},
		{"off", 0},
		{"", 0},
	} {
		if got := parseMemLimit(tc.in); got != tc.want {
			t.Errorf("parseMemLimit(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// A scale.md as the scale run of 2026-11-26 wrote it (its memory table's header and two rows, the
// second table's header), trimmed of nothing the reader needs.
const scaleMD = "Written by `go run ./test/bench scale` at commit `4fcd4a8` on 2026-11-26 (2 cores).\n" + `
| Pods | nodes | configmap-attacher, through the watch | configmap-attacher, started anew | KiB per Pod (anew − empty cluster) | ours, live heap (watch / anew) | ours with GOMEMLIMIT (sizing rule), started anew | with GOMEMLIMIT / kube-controller-manager | kube-controller-manager | ours / kube-controller-manager | configmap-rs-operator (watch / anew) | Reloader (watch / anew) | ours / best peer | baseline build (watch / anew) |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
| 1,032 Pods | 10 | 48.7 MiB | 46.0 MiB | 10.80 | 6.0 MiB / 5.3 MiB | 45.5 MiB (limit 96.0 MiB) | 1/3.5 | 159.6 MiB | 1/3.3 | 58.5 MiB / 55.7 MiB | 44.1 MiB / 41.1 MiB | 1/0.8 | 50.9 MiB / 47.1 MiB |
| 150,014 Pods | 1,395 | 610.5 MiB | 712.5 MiB | 4.62 | 286.2 MiB / 281.7 MiB | 530.3 MiB (limit 512.0 MiB) | 1/6.0 | 3177.8 MiB | 1/4.5 | — | — | — | — |

| Pods | built in | load average at start | caches synced |
| --- | --- | --- | --- |
| 1,032 Pods | 14s | 2.1 | 0.41 s |
`

func TestReadScaleRSSReadsTheMemoryTable(t *testing.T) {
	steps, err := readScaleRSS(scaleMD)
	if err != nil {
		t.Fatal(err)
	}
	tenths := func(b int64) int64 { return (b*10 + mi/2) / mi } // MiB × 10, as written
	type row struct{ pods, watch, anew, kcm, limited, rsOperator, reloader, baseline int64 }
	want := []row{
		{1032, 487, 460, 1596, 455, 557, 411, 471},
		{150014, 6105, 7125, 31778, 5303, 0, 0, 0},
	}
	if len(steps) != len(want) {
		t.Fatalf("read %d rows, want %d (the second table is not the memory table): %+v", len(steps), len(want), steps)
	}
	for i, s := range steps {
		got := row{int64(s.pods), tenths(s.watchRSS), tenths(s.startRSS), tenths(s.kcm), tenths(s.peersStart[limitedName]),
			tenths(s.peersStart[rsOperator]), tenths(s.peersStart["reloader"]), tenths(s.peersStart[baselineName])}
		if got != want[i] {
			t.Errorf("row %d: got %+v, want %+v", i, got, want[i])
		}
	}
}

func TestReadScaleRSSReadsWhatTheScaleRunWrites(t *testing.T) {
	// Today's columns, written by scaleTables: the reader follows a renamed or moved column.
	in := scaleStep{pods: 50_034, watchRSS: 122 * mi, startRSS: 105 * mi, kcm: 1384 * mi,
		peersStart: map[string]int64{limitedName: 103 * mi, "reloader": 90 * mi}, peersWatch: map[string]int64{"reloader": 95 * mi}}
	var b strings.Builder
	printScaleTable(&b, []scaleStep{in}, 33*mi)
	steps, err := readScaleRSS(b.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 {
		t.Fatalf("read %d rows, want 1:\n%s", len(steps), b.String())
	}
	s := steps[0]
	if s.pods != 50_034 || s.watchRSS != 122*mi || s.startRSS != 105*mi || s.kcm != 1384*mi ||
		s.peersStart[limitedName] != 103*mi || s.peersStart["reloader"] != 90*mi || s.peersStart[rsOperator] != 0 {
		t.Errorf("read %+v from:\n%s", s, b.String())
	}
}

func TestReadScaleRSSRefusesATextWithoutTheTable(t *testing.T) {
	if _, err := readScaleRSS("| Pods | built in |\n| --- | --- |\n| 1,032 Pods | 14s |\n"); err == nil {
		t.Error("no error for a text without the memory table")
	}
}

// -scale-watch-variant: each variant's environment and flags as given, and its name in the tables.
func TestParseWatchVariants(t *testing.T) {
	cases := []struct {
		in      string
		names   []string
		wantErr bool
	}{
		{in: ""},
		{in: "GOMEMLIMIT=224MiB", names: []string{"configmap-attacher with GOMEMLIMIT=224MiB"}},
		{in: "GOMEMLIMIT=224MiB,-gc-percent=100", names: []string{"configmap-attacher with GOMEMLIMIT=224MiB", "configmap-attacher with -gc-percent=100"}},
		{in: "-gc-percent=75 GOGC=off", names: []string{"configmap-attacher with GOGC=off -gc-percent=75"}},
		{in: "224MiB", wantErr: true},
		{in: "-profiling", wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := parseWatchVariants(c.in)
			if (err != nil) != c.wantErr {
				t.Fatalf("parseWatchVariants(%q) error %v; want an error: %v", c.in, err, c.wantErr)
			}
			var names []string
			for _, v := range got {
				if !isVariant(v.name()) {
					t.Errorf("%q is not told a variant", v.name())
				}
				names = append(names, v.name())
			}
			if !slices.Equal(names, c.names) {
				t.Fatalf("parseWatchVariants(%q) names %q; want %q", c.in, names, c.names)
			}
		})
	}
}
