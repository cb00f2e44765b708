package caches

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// ErrUnreadable is the error of an object whose pod template cannot be read: a ControllerRevision
// whose data is not {spec: {template}} (KubeVirt, OpenKruise and others write ControllerRevisions of
// their own shapes), a Rollout that cannot be converted. Whoever may create such an object must not
// be able to stall a cache or a namespace's deletions with it: the caches and the live check skip it,
// log it and count it (configmap_attacher_unreadable_objects).
//
// Skipping is safe: a revision that cannot be read as a pod template makes no pods (its controller
// cannot read it either), so it can hold no config in use, and what its pods read is judged by the
// pods themselves, which are read on their own.
var ErrUnreadable = errors.New("cannot be read as a pod template")

// UnreadableError says which object could not be read, and why.
type UnreadableError struct {
	Kind Kind
	Key  string // namespace/name
	Err  error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("%s %s %s: %v", e.Kind, e.Key, ErrUnreadable, e.Err)
}

func (e *UnreadableError) Unwrap() []error { return []error{ErrUnreadable, e.Err} }

func unreadable(kind Kind, namespace, name string, err error) error {
	return &UnreadableError{Kind: kind, Key: namespace + "/" + name, Err: err}
}

// skipped are the objects one informer skips because they cannot be read, by key: what the gauge
// counts, and what is logged once (not at every relist).
type skipped struct {
	mu   sync.Mutex
	keys map[string]Kind
	// streamed are the objects a watch-list's initial events could not read, until the list they
	// belong to is handed to the queue (fifo.Replace), which skips them with the others.
	streamed map[string]error
	log      *slog.Logger
}

func newSkipped() *skipped {
	return &skipped{keys: map[string]Kind{}, log: slog.New(slog.DiscardHandler)}
}

// kindOf is the kind an error of the reducer names ("" when it names none).
func kindOf(err error) Kind {
	var u *UnreadableError
	if errors.As(err, &u) {
		return u.Kind
	}
	return ""
}

// add notes that the object under key could not be read.
func (s *skipped) add(key string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.note(key, err)
}

func (s *skipped) note(key string, err error) {
	if _, known := s.keys[key]; !known {
		s.log.Warn("skipping an object the caches cannot read: it makes no pods", "kind", kindOf(err), "object", key, "err", err)
	}
	s.keys[key] = kindOf(err)
}

// drop notes that the object under key is gone, or can be read again.
func (s *skipped) drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
}

// stream records what one watch-list's initial events could not read.
func (s *skipped) stream(errs map[string]error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streamed = errs
}

// replace makes the skipped objects those a new list could not read (errs, and what the watch-list
// that brought the list could not read), logging the ones not skipped before.
func (s *skipped) replace(errs map[string]error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.keys
	s.keys = make(map[string]Kind, len(errs)+len(s.streamed))
	for _, m := range []map[string]error{s.streamed, errs} {
		for key, err := range m {
			if kind, known := old[key]; known {
				s.keys[key] = kind
				continue
			}
			s.note(key, err)
		}
	}
	s.streamed = nil
}

// count returns how many objects of kind are skipped.
func (s *skipped) count(kind Kind) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, k := range s.keys {
		if k == kind {
			n++
		}
	}
	return n
}
