package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// CMPServer is Argo CD's config management plugin server running one plugin.yaml next to the local
// repo server, as the plugin's sidecar runs in a real installation.
type CMPServer struct {
	*Process
	dirs []string
}

// StartCMPServer runs argocd-cmp-server with pluginYAML the way the sidecar of
// deploy/argocd-cmp/repo-server-patch.yaml does: its socket in the directory the local repo server
// scans for plugins (<cluster dir>/argocd/plugins, see hack/cluster/argocd.sh), and on its PATH only
// the tools given (name → path, e.g. helm and configmap-attacher) besides /usr/bin and /bin. The
// cluster's Argo CD must be running (EnsureArgoCD). Stop it with Close.
func (c *Cluster) StartCMPServer(ctx context.Context, pluginYAML string, tools map[string]string) (*CMPServer, error) {
	plugins := filepath.Join(filepath.Dir(c.Kubeconfig), "argocd", "plugins")
	if _, err := os.Stat(plugins); err != nil {
		return nil, fmt.Errorf("no local Argo CD plugin directory (run EnsureArgoCD first): %w", err)
	}
	s := &CMPServer{}
	mkdir := func(pattern string) (string, error) {
		d, err := os.MkdirTemp("", pattern)
		if err == nil {
			s.dirs = append(s.dirs, d)
		}
		return d, err
	}
	config, err := mkdir("cmp-config")
	if err != nil {
		return nil, err
	}
	work, err := mkdir("cmp-work")
	if err != nil {
		s.cleanup()
		return nil, err
	}
	bin, err := mkdir("cmp-bin")
	if err != nil {
		s.cleanup()
		return nil, err
	}
	b, err := os.ReadFile(pluginYAML)
	if err == nil {
		err = os.WriteFile(filepath.Join(config, "plugin.yaml"), b, 0o644)
	}
	for name, path := range tools {
		if err == nil {
			err = os.Symlink(path, filepath.Join(bin, name))
		}
	}
	if err != nil {
		s.cleanup()
		return nil, err
	}
	s.Process, err = Binary{Path: filepath.Join(c.root, "_output/tools/bin/argocd-cmp-server")}.Start(ctx, []string{
		"ARGOCD_PLUGINSOCKFILEPATH=" + plugins,
		"ARGOCD_CMP_WORKDIR=" + work,
		"ARGOCD_CMP_SERVER_LOGFORMAT=text",
		"PATH=" + bin + ":/usr/bin:/bin",
		"TMPDIR=" + work,
	}, "--config-dir-path", config)
	if err != nil {
		s.cleanup()
		return nil, err
	}
	// It logs "serving on <socket>" once it listens: the repo server finds plugins by listing that
	// directory on each request, so it is usable from then on.
	err = Eventually(ctx, 30*time.Second, "argocd-cmp-server to listen in "+plugins, func(context.Context) (bool, string, error) {
		if s.Exited() {
			return false, "", fmt.Errorf("argocd-cmp-server exited: %s", s.Logs())
		}
		return strings.Contains(s.Logs(), "serving on"), "not listening yet", nil
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close stops the server and removes its directories.
func (s *CMPServer) Close() {
	if s.Process != nil {
		_ = s.Stop()
	}
	s.cleanup()
}

func (s *CMPServer) cleanup() {
	for _, d := range s.dirs {
		_ = os.RemoveAll(d)
	}
}
