package manager

import (
	"context"
	"os"
	"runtime/debug"
	"testing"
)

// The GC's targets during and after the start, table in gcPercents' comment.
func TestGCPercents(t *testing.T) {
	cases := []struct {
		name          string
		envSet        bool
		start, steady int
		during, after int
		set           bool
	}{
		{name: "GOGC set: the operator's choice throughout", envSet: true, start: 25, steady: 50},
		{name: "both 0: Go's default throughout, nothing set", start: 0, steady: 0},
		{name: "the defaults", start: 50, steady: 50, during: 50, after: 50, set: true},
		{name: "the start lower than after it", start: 25, steady: 75, during: 25, after: 75, set: true},
		{name: "a start never collects less often than after it", start: 80, steady: 50, during: 50, after: 50, set: true},
		{name: "no start target: the steady one throughout", start: 0, steady: 75, during: 75, after: 75, set: true},
		{name: "no steady target: Go's 100 after a lower start", start: 50, steady: 0, during: 50, after: 100, set: true},
		{name: "no steady target, a start over 100: 100 throughout", start: 200, steady: 0, during: 100, after: 100, set: true},
		{name: "a steady target over 100 is the operator's", start: 50, steady: 200, during: 50, after: 200, set: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			during, after, set := gcPercents(c.envSet, c.start, c.steady)
			if during != c.during || after != c.after || set != c.set {
				t.Fatalf("gcPercents(%v, %d, %d) = %d, %d, %v; want %d, %d, %v", c.envSet, c.start, c.steady, during, after, set, c.during, c.after, c.set)
			}
		})
	}
}

// During the start the runtime collects at the start's target; once done, at -gc-percent's.
func TestStartGCSetsTheSteadyTargetWhenTheStartIsOver(t *testing.T) {
	t.Setenv("GOGC", "") // restored when the test ends; unset now, so that the flag decides
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	before := debug.SetGCPercent(80)
	defer debug.SetGCPercent(before)

	done := startGC(context.Background(), 25, 60)
	if during := debug.SetGCPercent(25); during != 25 {
		t.Fatalf("GOGC %d during the start; want 25", during)
	}
	done()
	if after := debug.SetGCPercent(80); after != 60 {
		t.Fatalf("GOGC %d after the start; want -gc-percent's 60", after)
	}
}
