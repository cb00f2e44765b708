package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/logging"
)

// ErrUnreachable means the API server could not be reached after bounded retries.
var ErrUnreachable = errors.New("API server unreachable")

// Explain rewrites API errors a user can act on. Forbidden errors already name the verb, resource and
// namespace ("cannot patch resource \"configmaps\" in API group \"\" in the namespace \"x\""); we add
// where to fix it.
func Explain(err error) error {
	if err == nil {
		return nil
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("missing RBAC permission (grant it to the service account, see docs/rbac.md): %w", err)
	}
	return err
}

// IsConnectionError reports failures to reach the server at all, which a short retry may cure.
func IsConnectionError(err error) bool {
	var netErr net.Error
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.As(err, &netErr) || apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err)
}

// WaitReachable asks for the server version with bounded backoff (about 15 s in all), so a Job started
// while the API server restarts survives, and a wrong address fails in seconds, not minutes.
func WaitReachable(ctx context.Context, kc kubernetes.Interface, host string) error {
	log := logging.FromContext(ctx)
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 5, Cap: 8 * time.Second}
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(context.Context) (bool, error) {
		v, err := kc.Discovery().ServerVersion()
		if err == nil {
			log.Debug("API server reachable", "host", host, "version", v.GitVersion)
			return true, nil
		}
		last = err
		if IsConnectionError(err) {
			log.Warn("API server not reachable, retrying", "host", host, "err", err)
			return false, nil
		}
		return false, err
	})
	if err == nil {
		return nil
	}
	if last != nil && IsConnectionError(last) {
		return fmt.Errorf("%w at %s after 5 attempts: %v (check -kubeconfig/-context or IS_IN_CLUSTER)", ErrUnreachable, host, last)
	}
	if last != nil {
		return Explain(last)
	}
	return err
}
