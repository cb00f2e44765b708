package trigger

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/content"
)

// DefaultKeySecret is the Secret holding the key of the trigger's keyed hash when Options names none
// (the manager names one in its own namespace: -config-hash-key-secret).
var DefaultKeySecret = types.NamespacedName{Namespace: "kube-system", Name: "configmap-attacher-config-hash-key"}

// keyData is the Secret's data key holding the key.
const keyData = "key"

// minKeyLength is the shortest key accepted: 128 bits.
const minKeyLength = 16

// hashKey is the key of the hash the trigger takes of what a workload reads of a Secret. The record
// (a ConfigMap, readable by the view role) and config-hash (on the pod template, readable by anyone who
// may read the workload) hold that hash: a plain one would let them check a guess of a low-entropy
// Secret offline. Keyed with a key only the controller can read, they tell nothing. The key is 32
// random bytes in a Secret of the controller's namespace, made by the first leader that needs it and
// never rotated by us: a new key makes every Secret content the records hold unknown (decide errs
// toward a new revision). Loaded on first use, by the leader only (a standby never hashes).
type hashKey struct {
	kube kubernetes.Interface
	ref  types.NamespacedName

	mu  sync.Mutex
	key []byte
	id  string
}

// keyIDInput is what the key's id is the keyed hash of: the record names the key its Secret entries
// were made with by that id, which tells nothing of the key.
const keyIDInput = "configmap-attacher.io/config-hash-key"

// get returns the key and its id, reading or creating the Secret the first time.
func (k *hashKey) get(ctx context.Context) ([]byte, string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key != nil {
		return k.key, k.id, nil
	}
	secrets := k.kube.CoreV1().Secrets(k.ref.Namespace)
	s, err := secrets.Get(ctx, k.ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, "", err
		}
		s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: k.ref.Name, Namespace: k.ref.Namespace,
			Labels: map[string]string{api.KeyLabel: api.KeyValue}}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{keyData: b}}
		s, err = secrets.Create(ctx, s, metav1.CreateOptions{FieldManager: api.FieldManager})
		if apierrors.IsAlreadyExists(err) { // another replica made it meanwhile
			s, err = secrets.Get(ctx, k.ref.Name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading the config trigger's hash key, Secret %s: %w (the controller needs get and create on it: docs/rbac.md)", k.ref, err)
	}
	key := s.Data[keyData]
	if len(key) < minKeyLength {
		return nil, "", fmt.Errorf("the config trigger's hash key, Secret %s, holds %d bytes under %q: want at least %d; delete the Secret and the controller makes a new one",
			k.ref, len(key), keyData, minKeyLength)
	}
	id, err := content.KeyedHash(key, keyIDInput)
	if err != nil {
		return nil, "", err
	}
	k.key, k.id = key, id
	return key, id, nil
}
