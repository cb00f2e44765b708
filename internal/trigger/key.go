package trigger

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/content"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
)

// DefaultKeySecret is the Secret holding the key of the trigger's keyed hash when Options names none
// (the manager names one in its own namespace: -config-hash-key-secret).
var DefaultKeySecret = types.NamespacedName{Namespace: "kube-system", Name: "configmap-attacher-config-hash-key"}

// keyData is the Secret's data key holding the key.
const keyData = "key"

// minKeyLength is the shortest key accepted: 128 bits.
const minKeyLength = 16

// errKeyUnavailable: the hash key cannot be read now (not listed yet, the Secret missing and not
// creatable, RBAC, a key too short). What a workload reads of a Secret is then known only where the
// record or this process knew it before (liveContent); the rest of the workload waits for the key.
var errKeyUnavailable = errors.New("the config trigger's hash key is not available")

// errKeyNotListed: the key watch has not listed the Secret yet (a start, a new leader): a moment, not a
// condition to tell; the list brings back what waited.
var errKeyNotListed = fmt.Errorf("%w: not listed yet", errKeyUnavailable)

// Back-off of the key Secret's creation while it fails (RBAC, the namespace missing): one request at
// most per interval, however many workloads need the key.
const (
	keyCreateFirstRetry = time.Second
	keyCreateMaxRetry   = 5 * time.Minute
)

// keyVersion is one key and its id ("" key: the id alone, a key this process does not hold).
type keyVersion struct {
	key []byte
	id  string
}

// hashKey is the key of the hash the trigger takes of what a workload reads of a Secret. The record
// (a ConfigMap, readable by the view role) and config-hash (on the pod template, readable by anyone who
// may read the workload) hold that hash: a plain one would let them check a guess of a low-entropy
// Secret offline. Keyed with a key only the controller can read, they tell nothing. The key is 32
// random bytes in a Secret of the controller's namespace, made by the leader when it is missing.
//
// The Secret is watched (watch), by the leader only (a standby never hashes): a key replaced or
// deleted is taken up at once, never kept stale in memory until the next failover. Every key this
// process has held stays known by its id, so a record made with one is re-keyed from the content
// (rekeyPairs) without a revision; after a restart the record's resourceVersions do that.
type hashKey struct {
	kube kubernetes.Interface
	ref  types.NamespacedName
	now  func() time.Time
	// changed is called when the key is (re)loaded: workloads held back for it look again.
	changed func()

	mu sync.Mutex
	// listed: the watch has listed the Secret (whether or not it exists).
	listed bool
	cur    *keyVersion
	// invalid says why the Secret present cannot be used ("" none).
	invalid string
	known   map[string][]byte
	// createAfter and backoff pace the Secret's creation while it fails; lastErr is its last error.
	createAfter time.Time
	backoff     time.Duration
	lastErr     error
}

// keyIDInput is what the key's id is the keyed hash of: the record names the key its Secret entries
// were made with by that id, which tells nothing of the key.
const keyIDInput = "configmap-attacher.io/config-hash-key"

func newHashKey(kube kubernetes.Interface, ref types.NamespacedName) *hashKey {
	return &hashKey{kube: kube, ref: ref, now: time.Now, changed: func() {}, known: map[string][]byte{}}
}

// watch follows the key Secret until ctx ends (a list and watch of that one name, in its namespace).
func (k *hashKey) watch(ctx context.Context) {
	inf := coreinformers.NewFilteredSecretInformer(k.kube, k.ref.Namespace, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", k.ref.Name).String()
	})
	observe := func(obj any) {
		if s, ok := obj.(*corev1.Secret); ok && s.Name == k.ref.Name {
			k.observe(ctx, s)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if s, ok := obj.(*corev1.Secret); ok && s.Name == k.ref.Name {
				k.observe(ctx, nil)
			}
		},
	})
	go inf.Run(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		k.mu.Lock()
		k.listed = true
		k.mu.Unlock()
		k.changed()
	}
}

// observe takes the Secret as the watch shows it (nil: it does not exist).
func (k *hashKey) observe(ctx context.Context, s *corev1.Secret) {
	k.mu.Lock()
	if s == nil {
		k.cur, k.invalid = nil, ""
		k.mu.Unlock()
		logging.FromContext(ctx).Warn("the config trigger's hash key Secret was deleted: a new key is made when next needed, "+
			"and each record is re-keyed from the content at its workload's next look", "secret", k.ref.String())
		return
	}
	key := s.Data[keyData]
	if len(key) < minKeyLength {
		k.cur, k.invalid = nil, fmt.Sprintf("Secret %s holds %d bytes under %q: want at least %d; delete the Secret and the controller makes a new one",
			k.ref, len(key), keyData, minKeyLength)
		k.mu.Unlock()
		return
	}
	id, err := content.KeyedHash(key, keyIDInput)
	if err != nil {
		k.mu.Unlock()
		return
	}
	was := k.cur
	k.cur, k.invalid, k.lastErr, k.backoff = &keyVersion{key: key, id: id}, "", nil, 0
	k.known[id] = key
	k.mu.Unlock()
	if was == nil || was.id != id {
		if was != nil {
			logging.FromContext(ctx).Warn("the config trigger's hash key changed: each record is re-keyed from the content at its workload's next look",
				"secret", k.ref.String(), "from", was.id, "to", id)
		}
		k.changed()
	}
}

// current returns the key, making the Secret when the watch shows none (paced by a back-off while
// that fails). An error wraps errKeyUnavailable.
func (k *hashKey) current(ctx context.Context) (keyVersion, error) {
	kv, made, err := k.currentOrMade(ctx)
	if made {
		k.changed() // the workloads held back for it go on at once
	}
	return kv, err
}

// currentOrMade is current; made: the key was made now.
func (k *hashKey) currentOrMade(ctx context.Context) (kv keyVersion, made bool, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.cur != nil:
		return *k.cur, false, nil
	case !k.listed:
		return keyVersion{}, false, fmt.Errorf("%w: Secret %s (the controller needs get, list and watch on it: docs/rbac.md)", errKeyNotListed, k.ref)
	case k.invalid != "":
		return keyVersion{}, false, fmt.Errorf("%w: %s", errKeyUnavailable, k.invalid)
	case k.now().Before(k.createAfter):
		return keyVersion{}, false, k.createError(k.lastErr)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return keyVersion{}, false, err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: k.ref.Name, Namespace: k.ref.Namespace,
		Labels: map[string]string{api.KeyLabel: api.KeyValue}}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{keyData: b}}
	got, err := k.kube.CoreV1().Secrets(k.ref.Namespace).Create(ctx, s, metav1.CreateOptions{FieldManager: api.FieldManager})
	if apierrors.IsAlreadyExists(err) { // another replica made it meanwhile: the watch brings it
		return keyVersion{}, false, fmt.Errorf("%w: Secret %s made meanwhile, not seen yet", errKeyUnavailable, k.ref)
	}
	if err != nil {
		k.backoff = min(max(2*k.backoff, keyCreateFirstRetry), keyCreateMaxRetry)
		k.createAfter, k.lastErr = k.now().Add(k.backoff), err
		return keyVersion{}, false, k.createError(err)
	}
	logging.FromContext(ctx).Warn("the config trigger's hash key Secret was missing: made a new key; records made with another key are re-keyed from the content",
		"secret", k.ref.String())
	id, err := content.KeyedHash(got.Data[keyData], keyIDInput)
	if err != nil {
		return keyVersion{}, false, err
	}
	k.cur, k.lastErr, k.backoff = &keyVersion{key: got.Data[keyData], id: id}, nil, 0
	k.known[id] = k.cur.key
	return *k.cur, true, nil
}

// createError says that the Secret cannot be made (the same words while it is retried with back-off).
func (k *hashKey) createError(err error) error {
	return fmt.Errorf("%w: creating Secret %s: %w (the controller needs create on Secrets and get, list and watch on this one: docs/rbac.md)",
		errKeyUnavailable, k.ref, err)
}

// held returns a key this process has held, by id.
func (k *hashKey) held(id string) (keyVersion, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, ok := k.known[id]
	return keyVersion{key: key, id: id}, ok && id != ""
}
