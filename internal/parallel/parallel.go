// Package parallel runs independent API writes a bounded number at a time: each waits on the API
// server, so one at a time its latency, not the client's rate limit, would set the pace.
package parallel

import (
	"errors"
	"sync"
)

// Group runs functions at most a limit at a time and keeps every error: one object's failure must
// not hide behind another's (errgroup keeps only the first).
type Group struct {
	slots chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	errs  []error
}

// New returns a Group running at most limit functions at once.
func New(limit int) *Group { return &Group{slots: make(chan struct{}, limit)} }

// Go runs fn once fewer than limit run (it blocks until then).
func (g *Group) Go(fn func() error) {
	g.slots <- struct{}{}
	g.wg.Add(1)
	go func() {
		defer func() { <-g.slots; g.wg.Done() }()
		if err := fn(); err != nil {
			g.mu.Lock()
			g.errs = append(g.errs, err)
			g.mu.Unlock()
		}
	}()
}

// Wait waits for every function and returns their errors joined (nil if none failed).
func (g *Group) Wait() error {
	g.wg.Wait()
	return errors.Join(g.errs...)
}
