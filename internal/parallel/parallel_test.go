package parallel

import (
	"errors"
	"sync/atomic"
	"testing"
)

func TestGroupRunsAtMostItsLimitAndKeepsEveryError(t *testing.T) {
	errA, errB := errors.New("a failed"), errors.New("b failed")
	g := New(3)
	var running, most atomic.Int32
	for i := range 20 {
		g.Go(func() error {
			now := running.Add(1)
			defer running.Add(-1)
			for {
				m := most.Load()
				if now <= m || most.CompareAndSwap(m, now) {
					break
				}
			}
			switch i {
			case 4:
				return errA
			case 15:
				return errB
			}
			return nil
		})
	}
	err := g.Wait()
	if !errors.Is(err, errA) || !errors.Is(err, errB) {
		t.Errorf("Wait() = %v, want both a failed and b failed", err)
	}
	if m := most.Load(); m > 3 {
		t.Errorf("%d ran at once, want at most 3", m)
	}
	if err := New(2).Wait(); err != nil {
		t.Errorf("an empty group: Wait() = %v, want nil", err)
	}
}
