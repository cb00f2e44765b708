package trigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/content"
)

// The record: what the trigger must remember of a workload across restarts, in a small ConfigMap of
// ours owned by the workload (controller: false, no blockOwnerDeletion), so the garbage collector
// removes it with the workload. Not an annotation on a ReplicaSet (the Deployment controller copies a
// Deployment's annotations onto its ReplicaSets and `kubectl rollout undo` copies a ReplicaSet's back
// onto the Deployment) and not another field of the user's workload. It lives in an annotation of the
// ConfigMap, so the metadata-only config cache holds it and reading it costs no request. The process
// keeps the record it decided last too (Controller.state): a record that cannot be written (a quota,
// an admission policy, a foreign object at its name) or that a user deletes is decided on from there,
// and written again when it can be.
//
// Nothing in it tells a Secret to whoever may read ConfigMaps: what a workload reads of a Secret is
// hashed with a key only the controller reads (hashKey), and the record names that key by id.
type record struct {
	// Values are the config-hash values we wrote (set, or set back) that a revision or the template
	// may still carry: a value on a template that is in here is ours to take back.
	Values map[string]bool
	// Revisions is, per revision uid, what the revision was made with, for the objects no snapshot
	// pins (a pinned revision's snapshot names carry its content already): an entry for every
	// revision the trigger has acknowledged as the newest. One content map per revision, no more.
	Revisions map[types.UID]map[string]string
	// Acknowledged is the newest revision as last decided and the content then: a revision is started
	// only for a change since.
	Acknowledged acknowledged
	// Unpinned are the objects its pods read that no snapshot pins, as last told (ConfigNotPinned).
	Unpinned []string
	// Key is the id of the hash key its Secret contents were taken with ("" when it holds none).
	Key string
	// Versions is, per object key, the resourceVersion of the object at which it held the acknowledged
	// content, as of the record's last write: an object still at that version holds it still, which a
	// process that never saw it needs (a revision made while it was away, a new hash key) and the API
	// server alone tells.
	Versions map[string]string

	// legacy: decoded from a record written before issue 37, whose Secret contents (and those of
	// objects read through the environment alone) were hashed plain: migrate carries them over.
	legacy bool
	// learnt are the values a legacy record proves ours by their content (learnWritten).
	learnt map[string]map[string]string
}

type acknowledged struct {
	// Revision is the newest revision acknowledged; with Wrote, the one our write was made on.
	Revision types.UID `json:"revision,omitempty"`
	// Wrote is our last write on the template until the record is next written: the revision it
	// makes is then the newest, made with Content. Not resolved at once, so a change costs one write
	// of the record.
	Wrote   *wrote            `json:"wrote,omitempty"`
	Content map[string]string `json:"content,omitempty"`
}

// wrote is a write of ours on the pod template: config-hash set to Value (Set) or removed, when the
// newest revision was numbered After; Back is the existing revision it goes back to.
type wrote struct {
	Value string    `json:"value,omitempty"`
	Set   bool      `json:"set"`
	After int64     `json:"after"`
	Back  types.UID `json:"back,omitempty"`
}

// made is the revision the write made, once it appeared: the revision it goes back to, renumbered
// above After; or the first revision numbered above After that carries the value (a later deploy
// keeping our value makes more of them).
func (w *wrote) made(revs []*caches.User) *caches.User {
	var first *caches.User
	for _, r := range revs {
		switch {
		case r.Number <= w.After:
		case w.Back != "":
			if r.UID == w.Back {
				return r
			}
		case w.Set && carries(r, w.Value) && (first == nil || r.Number < first.Number):
			first = r
		}
	}
	return first
}

// carries reports whether a revision's (or a workload's) pod template has config-hash value v.
func carries(u *caches.User, v string) bool {
	got, ok := u.TemplateAnnotations[api.ConfigHashAnnotation]
	return ok && got == v
}

func newRecord() *record {
	return &record{Values: map[string]bool{}, Revisions: map[types.UID]map[string]string{},
		Acknowledged: acknowledged{Content: map[string]string{}}, Versions: map[string]string{}}
}

func (r *record) clone() *record {
	out := newRecord()
	maps.Copy(out.Values, r.Values)
	for uid, c := range r.Revisions {
		out.Revisions[uid] = maps.Clone(c)
	}
	out.Acknowledged = acknowledged{Revision: r.Acknowledged.Revision, Content: maps.Clone(r.Acknowledged.Content)}
	if out.Acknowledged.Content == nil {
		out.Acknowledged.Content = map[string]string{}
	}
	if w := r.Acknowledged.Wrote; w != nil {
		cp := *w
		out.Acknowledged.Wrote = &cp
	}
	out.Unpinned = slices.Clone(r.Unpinned)
	maps.Copy(out.Versions, r.Versions)
	out.Key, out.legacy, out.learnt = r.Key, r.legacy, r.learnt
	return out
}

// resolveWrote records the revision our last write made, once it appeared, as made with what we
// wrote it for (the acknowledged content), and acknowledges it.
func (r *record) resolveWrote(revs []*caches.User, pinned map[string]bool) {
	wr := r.Acknowledged.Wrote
	if wr == nil {
		return
	}
	made := wr.made(revs)
	if made == nil {
		return
	}
	if _, known := r.Revisions[made.UID]; !known && wr.Back == "" {
		r.Revisions[made.UID] = unpinned(r.Acknowledged.Content, pinned)
	}
	r.Acknowledged.Revision, r.Acknowledged.Wrote = made.UID, nil
}

// tidy readies the record for a write: the revision our last write made, if it appeared, is recorded
// as made with what we wrote it for; revisions that are gone are dropped, and values no revision and
// no template carries any more.
func (r *record) tidy(revs []*caches.User, pinned map[string]bool, template *caches.User) {
	r.resolveWrote(revs, pinned)
	for uid := range r.Revisions {
		if !slices.ContainsFunc(revs, func(u *caches.User) bool { return u.UID == uid }) {
			delete(r.Revisions, uid)
		}
	}
	for v := range r.Values {
		inUse := slices.ContainsFunc(revs, func(u *caches.User) bool { return carries(u, v) }) ||
			(template != nil && carries(template, v)) || (r.Acknowledged.Wrote != nil && r.Acknowledged.Wrote.Value == v)
		if !inUse {
			delete(r.Values, v)
		}
	}
}

// unpinned is content less the pinned objects (their snapshots know them).
func unpinned(content map[string]string, pinned map[string]bool) map[string]string {
	out := map[string]string{}
	for k, v := range content {
		if !pinned[k] {
			out[k] = v
		}
	}
	return out
}

// stored is the record as its annotation holds it. Each object key (with the keys read, which a
// template reading hundreds of keys makes long) is written once, in Reads; each distinct content of
// it once, in Contents; a revision's content is one index per read into those (Made), so the record
// grows by a few bytes per object and revision, not by a copy of every key and hash.
type stored struct {
	V        int                  `json:"v"`
	Key      string               `json:"key,omitempty"`
	Reads    []string             `json:"reads,omitempty"`
	Contents [][]string           `json:"contents,omitempty"`
	Made     map[types.UID]string `json:"made,omitempty"`
	Values   []string             `json:"values,omitempty"`
	Ack      storedAck            `json:"ack"`
	Unpinned []string             `json:"unpinned,omitempty"`
	// Versions, one per read ("" none): the resourceVersion at which the object held the acknowledged
	// content (record.Versions). Added within version 2: a controller that does not know it ignores
	// it, and one that does reads a record without it as knowing none.
	Versions []string `json:"vers,omitempty"`
}

type storedAck struct {
	Revision types.UID `json:"revision,omitempty"`
	// Content, when it is not what Made says of Revision (after a rollback, while our write waits).
	Content *string `json:"content,omitempty"`
	Wrote   *wrote  `json:"wrote,omitempty"`
}

// recordVersion is the version of the stored form.
const recordVersion = 2

// encode writes the record in its stored form.
func (r *record) encode() (string, error) {
	contents := map[string]map[string]bool{}
	note := func(c map[string]string) {
		for k, v := range c {
			if contents[k] == nil {
				contents[k] = map[string]bool{}
			}
			contents[k][v] = true
		}
	}
	for _, c := range r.Revisions {
		note(c)
	}
	ackSame := r.Acknowledged.Revision != "" && r.Acknowledged.Wrote == nil && maps.Equal(r.Revisions[r.Acknowledged.Revision], r.Acknowledged.Content) &&
		r.Revisions[r.Acknowledged.Revision] != nil
	if !ackSame {
		note(r.Acknowledged.Content)
	}
	s := stored{V: recordVersion, Key: r.Key, Unpinned: r.Unpinned, Ack: storedAck{Revision: r.Acknowledged.Revision, Wrote: r.Acknowledged.Wrote}}
	s.Reads = slices.Sorted(maps.Keys(contents))
	index := make([]map[string]int, len(s.Reads))
	for i, k := range s.Reads {
		s.Contents = append(s.Contents, slices.Sorted(maps.Keys(contents[k])))
		index[i] = map[string]int{}
		for j, v := range s.Contents[i] {
			index[i][v] = j
		}
	}
	row := func(c map[string]string) string {
		var b strings.Builder
		for i, k := range s.Reads {
			if i > 0 {
				b.WriteByte(',')
			}
			if v, ok := c[k]; ok {
				b.WriteString(strconv.Itoa(index[i][v]))
			}
		}
		return b.String()
	}
	for k, rv := range r.Versions {
		if i, ok := slices.BinarySearch(s.Reads, k); ok && rv != "" {
			if s.Versions == nil {
				s.Versions = make([]string, len(s.Reads))
			}
			s.Versions[i] = rv
		}
	}
	if len(r.Revisions) > 0 {
		s.Made = map[types.UID]string{}
		for uid, c := range r.Revisions {
			s.Made[uid] = row(c)
		}
	}
	if !ackSame {
		c := row(r.Acknowledged.Content)
		s.Ack.Content = &c
	}
	s.Values = slices.Sorted(maps.Keys(r.Values))
	b, err := json.Marshal(s)
	return string(b), err
}

// errUnknownForm: a record this controller cannot read: written by a newer one (another stored form),
// or edited into something that is no record. It is left alone (never overwritten) and told; the
// workload is decided on from what this process holds.
var errUnknownForm = errors.New("not a stored form this controller reads")

// decode reads a record from its annotation: the stored form, or the form before issue 37 (marked
// legacy); "" is no record yet. Anything else is errUnknownForm.
func decode(text string) (*record, error) {
	var probe struct {
		V int `json:"v"`
	}
	if text == "" {
		return newRecord(), nil
	}
	if err := json.Unmarshal([]byte(text), &probe); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnknownForm, err)
	}
	switch {
	case probe.V == 0:
		return decodeLegacy(text)
	case probe.V != recordVersion:
		return nil, fmt.Errorf("%w: stored form v%d (this controller writes v%d: a newer controller wrote it)", errUnknownForm, probe.V, recordVersion)
	}
	var s stored
	if err := json.Unmarshal([]byte(text), &s); err != nil || len(s.Contents) != len(s.Reads) || (s.Versions != nil && len(s.Versions) != len(s.Reads)) {
		return nil, fmt.Errorf("%w: v%d with inconsistent fields (edited by hand?)", errUnknownForm, probe.V)
	}
	r := newRecord()
	r.Key, r.Unpinned = s.Key, s.Unpinned
	for i, rv := range s.Versions {
		if rv != "" {
			r.Versions[s.Reads[i]] = rv
		}
	}
	broken := fmt.Errorf("%w: v%d with an index out of its lists (edited by hand?)", errUnknownForm, probe.V)
	expand := func(row string) (map[string]string, bool) {
		out := map[string]string{}
		if len(s.Reads) == 0 {
			return out, row == ""
		}
		cells := strings.Split(row, ",")
		if len(cells) != len(s.Reads) {
			return nil, false
		}
		for i, cell := range cells {
			if cell == "" {
				continue
			}
			j, err := strconv.Atoi(cell)
			if err != nil || j < 0 || j >= len(s.Contents[i]) {
				return nil, false
			}
			out[s.Reads[i]] = s.Contents[i][j]
		}
		return out, true
	}
	for uid, row := range s.Made {
		c, ok := expand(row)
		if !ok {
			return nil, broken
		}
		r.Revisions[uid] = c
	}
	for _, v := range s.Values {
		r.Values[v] = true
	}
	r.Acknowledged.Revision, r.Acknowledged.Wrote = s.Ack.Revision, s.Ack.Wrote
	if s.Ack.Content != nil {
		c, ok := expand(*s.Ack.Content)
		if !ok {
			return nil, broken
		}
		r.Acknowledged.Content = c
	} else {
		r.Acknowledged.Content = maps.Clone(r.Revisions[s.Ack.Revision])
		if r.Acknowledged.Content == nil {
			r.Acknowledged.Content = map[string]string{}
		}
	}
	return r, nil
}

// decodeLegacy reads a record of before issue 37: a content map per value written and per revision,
// each key with the keys read.
func decodeLegacy(text string) (*record, error) {
	var old struct {
		Written      map[string]map[string]string    `json:"written"`
		Revisions    map[types.UID]map[string]string `json:"revisions"`
		Acknowledged acknowledged                    `json:"acknowledged"`
		Unpinned     []string                        `json:"unpinned"`
	}
	if err := json.Unmarshal([]byte(text), &old); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnknownForm, err)
	}
	r := newRecord()
	r.legacy, r.learnt = true, old.Written
	for v := range old.Written {
		r.Values[v] = true
	}
	for uid, c := range old.Revisions {
		r.Revisions[uid] = maps.Clone(c)
	}
	r.Acknowledged = old.Acknowledged
	if r.Acknowledged.Content == nil {
		r.Acknowledged.Content = map[string]string{}
	}
	r.Unpinned = old.Unpinned
	return r, nil
}

// learnWritten adds to a legacy record written before it kept the values we wrote the values it can
// prove ours: a revision's config-hash that is the hash of what the revision was made with, as only
// our write computes it. Done before migrate, whose contents are hashed anew.
func (r *record) learnWritten(revs []*caches.User) {
	for _, rev := range revs {
		made, ok := r.Revisions[rev.UID]
		v, has := rev.TemplateAnnotations[api.ConfigHashAnnotation]
		if !ok || !has || len(made) == 0 || r.Values[v] {
			continue
		}
		if h, err := content.HashJSON(made); err == nil && h == v {
			r.Values[v] = true
		}
	}
}

// migrate carries a legacy record over to today's hashes: where what an object reads is hashed
// otherwise now (a Secret, keyed; a ConfigMap read through the environment alone, without its
// binaryData), a content equal to what the object hashed the old way holds now becomes its hash now,
// and any other one unknownContent (other than now, not known: a plain Secret hash must not stay).
// now and then are today's and the old hash of each followed object.
func (r *record) migrate(now, then map[string]string, isSecret func(string) bool) {
	carry := func(c map[string]string) {
		for k, v := range c {
			h, followed := now[k]
			switch {
			case followed && then[k] == v:
				c[k] = h
			case followed && h != then[k]:
				c[k] = unknownContent
			case !followed && isSecret(k):
				delete(c, k) // not followed now: what the record held of it goes
			}
		}
	}
	for _, c := range r.Revisions {
		carry(c)
	}
	carry(r.Acknowledged.Content)
	r.legacy, r.learnt = false, nil
}

// rekeyed is one Secret's content under the record's key (old) and under the new one (new): what
// the object holds now, known under both.
type rekeyed struct{ old, new string }

// rekey carries the Secret contents of a record taken with another hash key over to key id: a content
// equal to what the object holds now under the old key (pairs, by object key) becomes its hash now;
// any other becomes unknownContent (it cannot be compared with what the Secrets hold: the decision
// errs toward a new revision, and a revert to an older revision made with it starts a new one). It
// returns the Secrets of the acknowledged content that became unknown (counted as changed), sorted.
func (r *record) rekey(id string, pairs map[string]rekeyed, isSecret func(string) bool) []string {
	if r.Key == id {
		return nil
	}
	var lost []string
	if r.Key != "" {
		carry := func(c map[string]string) []string {
			var unknown []string
			for k, v := range c {
				switch p, ok := pairs[k]; {
				case !isSecret(k):
				case ok && p.old == v:
					c[k] = p.new
				default:
					c[k] = unknownContent
					unknown = append(unknown, k)
				}
			}
			return unknown
		}
		for _, c := range r.Revisions {
			carry(c)
		}
		lost = carry(r.Acknowledged.Content)
		for _, k := range lost {
			delete(r.Versions, k)
		}
		sort.Strings(lost)
	}
	r.Key = id
	return lost
}

// noteVersions notes, for each object whose live content is the acknowledged one, the version it is
// at (Versions); an object that is not, or no longer followed, is dropped.
func (r *record) noteVersions(live, rvs map[string]string) {
	for k := range r.Versions {
		if _, ok := live[k]; !ok || live[k] != r.Acknowledged.Content[k] {
			delete(r.Versions, k)
		}
	}
	for k, v := range live {
		if a, ok := r.Acknowledged.Content[k]; ok && a == v && rvs[k] != "" {
			r.Versions[k] = rvs[k]
		}
	}
}

// maxRecordBytes bounds the record's annotation, under the API server's 256 KiB for all of an
// object's annotations: past it, the oldest revisions' contents go (fit).
const maxRecordBytes = 200 << 10

// fit encodes the record within maxRecordBytes, dropping what the oldest revisions were made with
// while it does not fit (never the newest's, nor the acknowledged one's): a revert to those then
// starts a new revision instead of going back, the error erring toward a new revision.
func (r *record) fit(revs []*caches.User) (string, error) {
	for {
		text, err := r.encode()
		if err != nil || len(text) <= maxRecordBytes {
			return text, err
		}
		var oldest *caches.User
		for _, rev := range revs {
			if _, ok := r.Revisions[rev.UID]; ok && rev.UID != revs[0].UID && rev.UID != r.Acknowledged.Revision &&
				(oldest == nil || rev.Number < oldest.Number) {
				oldest = rev
			}
		}
		if oldest == nil {
			return text, nil // the newest alone is too large: the write says so
		}
		delete(r.Revisions, oldest.UID)
	}
}

func recordName(w *caches.User) string { return RecordName(string(w.Kind()), w.Name) }

// RecordName is the name of the record of a workload of kind: configmap-attacher.<kind>.<workload>,
// shortened with a hash of the whole when that is too long for a ConfigMap name.
func RecordName(kind, workload string) string {
	name := fmt.Sprintf("configmap-attacher.%s.%s", strings.ToLower(kind), workload)
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	h, _ := content.HashJSON(name)
	return content.Name(name, h)
}

// onServer is the workload's record as the cache shows it.
type onServer struct {
	exists bool
	rv     string
	text   string
	// previous: ours, owned by an earlier workload of this kind and name (deleted and created again,
	// as Flux and Argo CD force-replace): taken over by the next write.
	previous bool
	// foreign says why the object at the record's name is not the workload's record ("": it is);
	// unknown, why the record there cannot be read (a stored form this controller does not know).
	foreign, unknown string
}

// records reads and writes records.
type records struct {
	kube    kubernetes.Interface
	configs *caches.Informer[*metav1.PartialObjectMetadata] // the widened ConfigMap informer
}

// lookup returns the workload's record as the cache shows it.
func (rs records) lookup(w *caches.User) (onServer, error) {
	m, exists, err := rs.configs.Get(w.Namespace, recordName(w))
	if err != nil || !exists {
		return onServer{}, err
	}
	s := onServer{exists: true, rv: m.ResourceVersion, text: m.Annotations[api.RecordAnnotation]}
	ours := m.Labels[api.RecordLabel] == api.RecordValue
	switch {
	case ours && ownedBy(m, func(o metav1.OwnerReference) bool { return o.UID == w.UID }):
	case ours && ownedBy(m, func(o metav1.OwnerReference) bool {
		return o.Kind == w.TypeMeta.Kind && o.Name == w.Name && o.APIVersion == w.APIVersion
	}):
		s.previous = true
	default:
		s.foreign = fmt.Sprintf("ConfigMap %s/%s exists and is not %s's record (label %s=%s, owned by it): rename it",
			w.Namespace, m.Name, describe(w), api.RecordLabel, api.RecordValue)
	}
	return s, nil
}

func ownedBy(m *metav1.PartialObjectMetadata, match func(metav1.OwnerReference) bool) bool {
	return slices.ContainsFunc(m.OwnerReferences, match)
}

// save writes the record's text: created with its ownerReference, or applied over the version the
// cache shows (a conflict means the cache is behind: the sync is retried). Server-side apply under our
// field manager lists only our label, our annotation and our ownerReference, so nothing another
// writer put on it is touched; a record of an earlier workload of the name is taken over (its
// ownerReference, ours, replaced). It returns the written version's resourceVersion.
func (rs records) save(ctx context.Context, w *caches.User, text string, s onServer) (string, error) {
	name := recordName(w)
	owner := ownerOf(w)
	if !s.exists {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace,
			Labels:          map[string]string{api.RecordLabel: api.RecordValue},
			Annotations:     map[string]string{api.RecordAnnotation: text},
			OwnerReferences: []metav1.OwnerReference{owner}}}
		got, err := rs.kube.CoreV1().ConfigMaps(w.Namespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: api.FieldManager})
		if err != nil {
			return "", fmt.Errorf("creating the record %s/%s: %w", w.Namespace, name, err)
		}
		return got.ResourceVersion, nil
	}
	ac := corev1ac.ConfigMap(name, w.Namespace).
		WithResourceVersion(s.rv).
		WithLabels(map[string]string{api.RecordLabel: api.RecordValue}).
		WithAnnotations(map[string]string{api.RecordAnnotation: text}).
		WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion(owner.APIVersion).WithKind(owner.Kind).
			WithName(owner.Name).WithUID(owner.UID).WithController(false))
	got, err := rs.kube.CoreV1().ConfigMaps(w.Namespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: api.FieldManager, Force: true})
	if err != nil {
		return "", fmt.Errorf("writing the record %s/%s: %w", w.Namespace, name, err)
	}
	return got.ResourceVersion, nil
}

// retried reports whether a failed write of the record is the cache being behind (a conflict, an
// object created or deleted meanwhile), which a retry with a fresh look resolves; any other refusal
// (a quota, an admission policy, RBAC, too large) means the record cannot be kept for now.
func retried(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err)
}

// ownerOf is the ownerReference the record carries: the workload, controller false, no
// blockOwnerDeletion (nothing should wait for it to delete a workload).
func ownerOf(w *caches.User) metav1.OwnerReference {
	no := false
	return metav1.OwnerReference{APIVersion: w.APIVersion, Kind: w.TypeMeta.Kind, Name: w.Name, UID: w.UID, Controller: &no}
}
