package webhookcert

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	admissioninformers "k8s.io/client-go/informers/admissionregistration/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
)

// Name names the controller in logs and metrics.
const Name = "webhook-certificate"

// key is the one key of the controller's queue: there is one Secret and one configuration.
const key = "certificate"

// MinValidity is the shortest serving certificate lifetime accepted (-webhook-cert-validity): tests
// rotate every 20 s with it; shorter would leave replicas too little time to load each new one.
const MinValidity = 30 * time.Second

// MaxValidity is the longest: five years, a CA of fifty (ten lifetimes of 29 years and more would not
// fit a time.Duration, and nothing should trust a key that long).
const MaxValidity = 5 * 365 * 24 * time.Hour

// Target is the webhook configuration the caBundle goes into.
type Target interface {
	// Apply makes the configuration carry caBundle; live is the configuration as cached (nil: none).
	// It reports whether it wrote.
	Apply(ctx context.Context, live *admissionregistrationv1.MutatingWebhookConfiguration, caBundle []byte) (bool, error)
	// Bundle is the caBundle live holds for our webhook.
	Bundle(live *admissionregistrationv1.MutatingWebhookConfiguration) []byte
}

// Informers watch the certificate Secret and the webhook configuration, each alone by name (RBAC can
// then name them): every replica serves from the first, checked against the second; the leader
// reconciles both.
type Informers struct {
	Secrets       cache.SharedIndexInformer
	Configuration cache.SharedIndexInformer
	namespace     string
	secret, name  string
	// served are the Serving's handlers: Run returns once they have been handed every cached object, so
	// a replica that starts with a certificate in the Secret serves it before it listens.
	served []cache.ResourceEventHandlerRegistration
	// recheck is Serving's periodic look at the Secret (nil until Serve).
	recheck func()
}

// NewInformers makes the two informers.
func NewInformers(kube kubernetes.Interface, namespace, secret, configuration string) *Informers {
	byName := func(name string) func(*metav1.ListOptions) {
		return func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}
	}
	return &Informers{
		Secrets:       coreinformers.NewFilteredSecretInformer(kube, namespace, 0, cache.Indexers{}, byName(secret)),
		Configuration: admissioninformers.NewFilteredMutatingWebhookConfigurationInformer(kube, 0, cache.Indexers{}, byName(configuration)),
		namespace:     namespace, secret: secret, name: configuration,
	}
}

// Run runs both informers until ctx ends, waits for their caches and for Serve's handlers, and re-checks
// what is served every RecheckPeriod.
func (i *Informers) Run(ctx context.Context) error {
	go i.Secrets.Run(ctx.Done())
	go i.Configuration.Run(ctx.Done())
	synced := []cache.InformerSynced{i.Secrets.HasSynced, i.Configuration.HasSynced}
	for _, r := range i.served {
		synced = append(synced, r.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return errors.New("the webhook certificate Secret and configuration caches did not sync")
	}
	if i.recheck != nil {
		go wait.UntilWithContext(ctx, func(context.Context) { i.recheck() }, RecheckPeriod)
	}
	return nil
}

// Serve makes s follow the Secret, trusting what target reads as the configuration's caBundle.
func (i *Informers) Serve(s *Serving, target Target) error {
	s.secret = func() *corev1.Secret {
		obj, exists, err := i.Secrets.GetStore().GetByKey(i.namespace + "/" + i.secret)
		if secret, ok := obj.(*corev1.Secret); ok && exists && err == nil {
			return secret
		}
		return nil
	}
	s.registered = func() ([]*x509.Certificate, bool) {
		obj, exists, err := i.Configuration.GetStore().GetByKey(i.name)
		cfg, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration)
		if !ok || !exists || err != nil {
			return nil, false
		}
		return ParseBundle(target.Bundle(cfg)), true
	}
	i.recheck = s.recheck
	load := func(obj any) {
		if secret, ok := obj.(*corev1.Secret); ok {
			s.Load(secret)
		}
	}
	secrets, err := i.Secrets.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: load, UpdateFunc: func(_, obj any) { load(obj) }})
	if err != nil {
		return err
	}
	// A caBundle that changed may now trust a certificate passed over before; Ready waits for a new one
	// to settle.
	again := func(obj any, initial bool) {
		var bundle []*x509.Certificate
		if cfg, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
			bundle = ParseBundle(target.Bundle(cfg))
		}
		s.observe(bundle, initial)
		s.recheck()
	}
	bundles, err := i.Configuration.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{AddFunc: again,
		UpdateFunc: func(_, obj any) { again(obj, false) }, DeleteFunc: func(any) { again(nil, false) }})
	if err != nil {
		return err
	}
	i.served = append(i.served, secrets, bundles)
	return nil
}

// Options say what the certificates are for.
type Options struct {
	Namespace, Secret, Configuration string
	// Hosts are the names the API server dials: DNS names or IP addresses.
	Hosts []string
	// Validity is a serving certificate's lifetime.
	Validity time.Duration
	// OwnsConfiguration: the target makes the configuration itself (a URL); otherwise another tool
	// (the chart) makes it and only its caBundle is filled in.
	OwnsConfiguration bool
}

// Controller is the leader's: it keeps the Secret's CAs and serving certificate fresh (plan) and the
// configuration's caBundle equal to the Secret's bundle, restoring it within a second of anyone else
// changing it.
type Controller struct {
	kube    kubernetes.Interface
	opts    Options
	inf     *Informers
	serving *Serving
	target  Target
	loop    *reconcile.Loop
	now     func() time.Time

	mu sync.Mutex
	// seen is when each registered CA (by fingerprint) was first seen in the caBundle, continuously.
	seen firstSeen
	// missing: the configuration was absent at the last sync (said once).
	missing bool
	// seenConfiguration: it existed at some sync. A configuration deleted after that stays deleted,
	// even one we own: a wipe is an accident to repair, a deletion a decision (an uninstall takes the
	// webhook out of the pod path that way before it stops the controller).
	seenConfiguration bool
	// made: this process created it and its cache has not shown it yet (no news that it is missing).
	made bool
}

// NewController wires the controller to the informers; s is this replica's Serving (the leader
// serves what it writes at once, and remembers it).
func NewController(kube kubernetes.Interface, inf *Informers, s *Serving, target Target, m *metrics.Metrics, opts Options) (*Controller, error) {
	if opts.Validity < MinValidity || opts.Validity > MaxValidity {
		return nil, fmt.Errorf("serving certificate validity %s is not within %s and %s", opts.Validity, MinValidity, MaxValidity)
	}
	c := &Controller{kube: kube, opts: opts, inf: inf, serving: s, target: target, now: time.Now, seen: firstSeen{}}
	c.loop = &reconcile.Loop{Name: Name, Queue: reconcile.NewQueue(Name, m), Sync: c.sync, Metrics: m,
		Resync: func(context.Context) { c.loop.Queue.Add(key) }, ResyncPeriod: time.Minute}
	enqueue := func(any) { c.loop.Queue.Add(key) }
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue}
	for _, i := range []cache.SharedIndexInformer{inf.Secrets, inf.Configuration} {
		if _, err := i.AddEventHandler(handler); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Loop is the controller's worker loop.
func (c *Controller) Loop() *reconcile.Loop {
	c.loop.Queue.Add(key)
	return c.loop
}

func (c *Controller) sync(ctx context.Context, _ string) (reconcile.Result, error) {
	log := logging.FromContext(ctx).With("secret", c.opts.Namespace+"/"+c.opts.Secret, "configuration", c.opts.Configuration)
	secret, exists, err := c.secret()
	if err != nil {
		return reconcile.Result{}, err
	}
	live, err := c.configuration()
	if err != nil {
		return reconcile.Result{}, err
	}
	now := c.now()
	registered := ParseBundle(c.target.Bundle(live))
	propagated := c.observe(registered, now)
	var distrusted []string
	if secret != nil {
		distrusted = ParseDistrust(secret.Annotations[DistrustAnnotation])
	}
	d, err := plan(state{now: now, stored: parseSecret(secret), exists: exists, known: c.serving.knownAuthority(),
		registered: registered, propagated: propagated, distrusted: distrusted, hosts: c.opts.Hosts, validity: c.opts.Validity})
	if err != nil {
		return reconcile.Result{}, err
	}
	bundle := parseSecret(secret).bundlePEM()
	if d.write != nil {
		written, err := c.store(ctx, secret, d.write)
		if err != nil {
			return reconcile.Result{}, err
		}
		c.serving.Load(written)
		bundle = d.write.bundlePEM()
		log.Info("webhook certificates", "change", d.why, "cas", fingerprints(d.write.bundle), "servingNotAfter", notAfter(d.write))
	}
	create, said := c.mayMake(live)
	if said {
		log.Warn("the webhook configuration does not exist: no caBundle to register until it does (the chart creates it; " +
			"one that existed and was deleted, as an uninstall does, is not made again by this process)")
	}
	var applied bool
	if live != nil || create {
		if applied, err = c.target.Apply(ctx, live, bundle); err != nil {
			return reconcile.Result{}, err
		}
		if applied {
			c.mu.Lock()
			c.seenConfiguration, c.made = true, live == nil
			c.mu.Unlock()
		}
	}
	if applied {
		log.Info("registered the caBundle", "cas", fingerprints(ParseBundle(bundle)), "was", fingerprints(registered))
	}
	return reconcile.Result{RequeueAfter: d.requeue}, nil
}

// mayMake reports whether an absent configuration may be made (ours, and never seen deleted), and
// whether its absence is news to log.
func (c *Controller) mayMake(live *admissionregistrationv1.MutatingWebhookConfiguration) (create, news bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if live != nil {
		c.seenConfiguration, c.missing, c.made = true, false, false
		return false, false
	}
	if c.made {
		return false, false // our create, not in the cache yet
	}
	create = c.opts.OwnsConfiguration && !c.seenConfiguration
	news = !create && !c.missing
	c.missing = !create
	return create, news
}

// observe records which registered CAs are new and returns whether a CA has been registered for
// caPropagation since this process first saw it there. One clock only, this process's: the time the API
// server wrote in managedFields, compared with ours, would let a leader whose clock runs ahead sign with a
// CA some API servers have not loaded yet. A new leader thus waits caPropagation before a CA it has not
// seen long enough signs; what is served meanwhile stays trusted.
func (c *Controller) observe(registered []*x509.Certificate, now time.Time) func(*x509.Certificate) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen.update(registered, now)
	since := maps.Clone(c.seen) // the decision reads this sync's view, not later ones
	return func(ca *x509.Certificate) bool {
		t, ok := since[Fingerprint(ca)]
		return ok && now.Sub(t) >= caPropagation
	}
}

func (c *Controller) secret() (*corev1.Secret, bool, error) {
	obj, exists, err := c.inf.Secrets.GetStore().GetByKey(c.opts.Namespace + "/" + c.opts.Secret)
	if err != nil || !exists {
		return nil, false, err
	}
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return nil, false, fmt.Errorf("cached %T for Secret %s/%s", obj, c.opts.Namespace, c.opts.Secret)
	}
	return s, true, nil
}

func (c *Controller) configuration() (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	obj, exists, err := c.inf.Configuration.GetStore().GetByKey(c.opts.Configuration)
	if err != nil || !exists {
		return nil, err
	}
	cfg, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration)
	if !ok {
		return nil, fmt.Errorf("cached %T for MutatingWebhookConfiguration %s", obj, c.opts.Configuration)
	}
	return cfg, nil
}

// store writes a to the Secret, conditional on the resourceVersion planned from (a conflict is
// retried from the new content), and returns what was written.
func (c *Controller) store(ctx context.Context, cur *corev1.Secret, a *authority) (*corev1.Secret, error) {
	data, err := a.data()
	if err != nil {
		return nil, err
	}
	secrets := c.kube.CoreV1().Secrets(c.opts.Namespace)
	if cur == nil {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: c.opts.Secret, Namespace: c.opts.Namespace}, Type: corev1.SecretTypeTLS, Data: data}
		out, err := secrets.Create(ctx, s, metav1.CreateOptions{FieldManager: api.FieldManager})
		if err != nil {
			return nil, fmt.Errorf("creating the webhook certificate Secret %s/%s: %w", c.opts.Namespace, c.opts.Secret, err)
		}
		return out, nil
	}
	s := cur.DeepCopy()
	for k, v := range data {
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[k] = v
	}
	if _, ok := data[keyNextKey]; !ok {
		delete(s.Data, keyNextKey)
	}
	out, err := secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: api.FieldManager})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("the webhook certificate Secret %s/%s changed meanwhile: %w", c.opts.Namespace, c.opts.Secret, err)
	}
	if err != nil {
		return nil, fmt.Errorf("writing the webhook certificate Secret %s/%s: %w", c.opts.Namespace, c.opts.Secret, err)
	}
	return out, nil
}

func fingerprints(cas []*x509.Certificate) []string {
	out := make([]string, 0, len(cas))
	for _, ca := range cas {
		out = append(out, Fingerprint(ca))
	}
	return out
}

func notAfter(a *authority) string {
	if leaf := servingLeaf(a); leaf != nil {
		return leaf.NotAfter.UTC().Format(time.RFC3339)
	}
	return ""
}
