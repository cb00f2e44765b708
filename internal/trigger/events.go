package trigger

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/caches"
)

// Reasons of the Events the trigger records on workloads (`kubectl describe deployment web`).
const (
	// ReasonStarted: the config-hash annotation was written; a new revision starts.
	ReasonStarted = "ConfigStartsRevision"
	// ReasonBack: the annotation was set back; the workload returns to an existing revision.
	ReasonBack = "ConfigRevertsRevision"
	// ReasonTakenBack: another field manager owned the config-hash annotation with a value we wrote
	// (a rollback copies it); our write took it back to start the revision.
	ReasonTakenBack = "ConfigHashTakenBack"
	// ReasonUnpinned (Warning): objects the pods read are not pinned, so older revisions' pods that
	// start after a change read the new content; told once per workload until that list changes.
	ReasonUnpinned = "ConfigNotPinned"
	// ReasonOverruled (Warning): someone else changed the template back, or owns the annotation with
	// a value we never wrote; no write until the content changes again.
	ReasonOverruled = "ConfigTriggerOverruled"
	// ReasonInvalid (Warning): the annotations cannot be followed (a malformed list, a named object
	// missing, a kind we do not revise): nothing is written.
	ReasonInvalid = "ConfigTriggerInvalid"
	// ReasonNotHonoured (Warning): a Reloader annotation we do not honour, and what happens instead.
	ReasonNotHonoured = "ReloaderAnnotationNotHonoured"
	// ReasonRecordNotKept (Warning): the workload's record cannot be written (a quota, an admission
	// policy, RBAC, a foreign object at its name): revisions still start, decided from memory.
	ReasonRecordNotKept = "ConfigRecordNotKept"
	// ReasonOptedOut (Warning): the opt-in annotations went with a change of the pod template (kubectl
	// rollout undo to a revision made before the workload opted in); names them.
	ReasonOptedOut = "ConfigTriggerOptedOut"
	// ReasonKeyChanged (Warning): the workload's record was made with another hash key than the
	// controller's (its Secret lost, replaced, or read from another namespace): what could be carried
	// over was, and which Secrets count as changed.
	ReasonKeyChanged = "ConfigHashKeyChanged"
	// ReasonKeyUnreadable (Warning): a Secret the workload reads changed while the hash key cannot be
	// read: the workload is held back until it can.
	ReasonKeyUnreadable = "ConfigHashKeyUnreadable"
	// ReasonNeverSettled (Warning): the content kept changing for -config-max-wait; the revision
	// started with the content of that moment; names what kept changing.
	ReasonNeverSettled = "ConfigNeverSettled"
	// ReasonSnapshotMissing (Warning): the newest revision's snapshot of a pinned object did not come
	// within -config-max-wait; decided without it.
	ReasonSnapshotMissing = "ConfigSnapshotMissing"
)

// involved is the Event reference of a workload.
func involved(u *caches.User) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: u.APIVersion, Kind: u.TypeMeta.Kind, Namespace: u.Namespace, Name: u.Name, UID: u.UID}
}

// describe names a workload as kubectl does: deployment/web.
func describe(u *caches.User) string { return strings.ToLower(u.TypeMeta.Kind) + "/" + u.Name }

// event records a Normal event on a workload.
func (c *Controller) event(u *caches.User, reason, format string, args ...any) {
	if c.events != nil {
		c.events.Event(involved(u), corev1.EventTypeNormal, reason, fmt.Sprintf(format, args...))
	}
}

// tell records a Warning on a workload once for as long as the condition (the message) lasts: syncs
// come with every status update of a workload, and a warning repeated at each is noise. It reports
// whether it recorded one.
func (c *Controller) tell(u *caches.User, reason, format string, args ...any) bool {
	return c.tellAbout(u, reason, "", format, args...)
}

// tellAbout is tell for one of several conditions of the same reason (topic tells them apart).
func (c *Controller) tellAbout(u *caches.User, reason, topic, format string, args ...any) bool {
	msg := fmt.Sprintf(format, args...)
	key := u.Key() + "#" + reason + "#" + topic
	c.mu.Lock()
	same := c.told[key] == msg
	c.told[key] = msg
	c.mu.Unlock()
	if same {
		return false
	}
	if c.events != nil {
		c.events.Event(involved(u), corev1.EventTypeWarning, reason, msg)
	}
	return true
}

// keyChanged tells that the workload's record was made with another hash key, and counts it: lost
// are the Secrets whose content could not be carried over (they count as changed), of carried+lost.
func (c *Controller) keyChanged(w *caches.User, from, to string, carried int, lost []string) {
	result, what := "kept", fmt.Sprintf("Every Secret content it holds was carried over (%d by what the Secrets hold): no revision starts for it", carried)
	if len(lost) > 0 {
		result = "lost"
		what = fmt.Sprintf("%s changed since the record noted it (or cannot be told): counted as changed, so a revision starts for it", strings.Join(lost, ", "))
	}
	// Told once per key change (a record write retried carries the same record over again).
	if c.tellAbout(w, ReasonKeyChanged, from+">"+to, "the record of %s was made with hash key %s, the controller's key "+
		"(Secret %s) is %s: the Secret was deleted, replaced, or is read from another namespace (-leader-election-namespace, the "+
		"release namespace). %s. A lost key Secret is best restored from a backup",
		describe(w), from, c.key.ref, to, what) {
		c.count(c.keyChangedTotal, w, result)
	}
}

// untell forgets a reported condition that ended, so it is reported again should it come back.
func (c *Controller) untell(u *caches.User, reason, topic string) {
	c.mu.Lock()
	delete(c.told, u.Key()+"#"+reason+"#"+topic)
	c.mu.Unlock()
}
