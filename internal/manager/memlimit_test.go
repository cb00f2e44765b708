package manager

import (
	"context"
	"os"
	"runtime/debug"
	"testing"
)

// The start's GC target, table in startGCPercent's comment.
func TestStartGCPercent(t *testing.T) {
	cases := []struct {
		name    string
		envSet  bool
		flag    int
		want    int
		lowered bool
	}{
		{name: "GOGC set: the operator's choice throughout", envSet: true, flag: 25},
		{name: "0 disables", flag: 0},
		{name: "100 is the default target: nothing to lower", flag: 100},
		{name: "over 100 would raise it: not what a start needs", flag: 200},
		{name: "the default flag", flag: 50, want: 50, lowered: true},
		{name: "1", flag: 1, want: 1, lowered: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, lowered := startGCPercent(c.envSet, c.flag)
			if got != c.want || lowered != c.lowered {
				t.Fatalf("startGCPercent(%v, %d) = %d, %v; want %d, %v", c.envSet, c.flag, got, lowered, c.want, c.lowered)
			}
		})
	}
}

// During the start the runtime collects at the start's target; once done, at the one it had before.
func TestStartGCSetsTheTargetBackWhenTheStartIsOver(t *testing.T) {
	t.Setenv("GOGC", "") // restored when the test ends; unset now, so that the flag decides
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	before := debug.SetGCPercent(80)
	defer debug.SetGCPercent(before)

	done := startGC(context.Background(), 25)
	if during := debug.SetGCPercent(25); during != 25 {
		t.Fatalf("GOGC %d during the start; want 25", during)
	}
	done()
	if after := debug.SetGCPercent(80); after != 80 {
		t.Fatalf("GOGC %d after the start; want the 80 it had before", after)
	}
}
