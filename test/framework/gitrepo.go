package framework

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// GitRepo is a git repository served over HTTP on 127.0.0.1 the way a Git host serves one: git's own
// smart HTTP server, `git http-backend` (Debian's git), run as CGI by Go's net/http/cgi. Argo CD's
// repo server clones and fetches it like any public repository. Commits go to a working clone and are
// pushed to the served bare repository.
type GitRepo struct {
	URL string // http://127.0.0.1:<port>/repo.git, an Application's spec.source.repoURL

	dir  string
	work string
	srv  *http.Server
}

// ServeGitRepo creates an empty repository (branch main) and serves it.
func ServeGitRepo(ctx context.Context) (*GitRepo, error) {
	dir, err := os.MkdirTemp("", "git-repo")
	if err != nil {
		return nil, err
	}
	r := &GitRepo{dir: dir, work: filepath.Join(dir, "work")}
	execPath, err := exec.CommandContext(ctx, "git", "--exec-path").Output()
	if err != nil {
		r.cleanup()
		return nil, fmt.Errorf("git is missing (apt-get install git): %w", err)
	}
	for _, args := range [][]string{
		{"init", "--quiet", "--bare", "--initial-branch=main", filepath.Join(dir, "repo.git")},
		{"init", "--quiet", "--initial-branch=main", r.work},
	} {
		if _, err := r.git(ctx, dir, args...); err != nil {
			r.cleanup()
			return nil, err
		}
	}
	if _, err := r.git(ctx, r.work, "remote", "add", "origin", filepath.Join(dir, "repo.git")); err != nil {
		r.cleanup()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.cleanup()
		return nil, err
	}
	r.URL = "http://" + ln.Addr().String() + "/repo.git"
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + dir, "GIT_HTTP_EXPORT_ALL=1"},
	}
	r.srv = &http.Server{Handler: backend, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Commit writes files (path relative to the repository root -> content), commits them and pushes to
// the served repository. It returns the commit's sha.
func (r *GitRepo) Commit(ctx context.Context, message string, files map[string]string) (string, error) {
	for path, content := range files {
		p := filepath.Join(r.work, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	for _, args := range [][]string{{"add", "-A"}, {"commit", "--quiet", "-m", message}, {"push", "--quiet", "origin", "main"}} {
		if _, err := r.git(ctx, r.work, args...); err != nil {
			return "", err
		}
	}
	sha, err := r.git(ctx, r.work, "rev-parse", "HEAD")
	return strings.TrimSpace(sha), err
}

func (r *GitRepo) git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	// A fixed identity and no user or system configuration: the test's commits are reproducible.
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+r.dir,
		"GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@example.com", "GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@example.com")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// Close stops serving and removes the repository.
func (r *GitRepo) Close() error {
	err := r.srv.Close()
	r.cleanup()
	return err
}

func (r *GitRepo) cleanup() { _ = os.RemoveAll(r.dir) }

// GitApp is an Application deploying the plain manifests of a directory of a git repository (no Helm,
// no plugin), with automated sync.
type GitApp struct {
	Name      string // in ArgoCDNamespace
	RepoURL   string
	Path      string // directory in the repository
	Namespace string // destination namespace
	Automated *AutoSync
	// ServerSideDiff compares with a server-side apply dry run (annotation
	// argocd.argoproj.io/compare-options: ServerSideDiff=true) instead of the legacy three-way diff.
	ServerSideDiff bool
	// IgnoreDifferences is spec.ignoreDifferences; SyncOptions spec.syncPolicy.syncOptions.
	IgnoreDifferences []map[string]any
	SyncOptions       []string
}

// Object renders the Application.
func (a GitApp) Object() *unstructured.Unstructured {
	policy := map[string]any{}
	if a.Automated != nil {
		policy["automated"] = map[string]any{"prune": a.Automated.Prune, "selfHeal": a.Automated.SelfHeal}
	}
	if len(a.SyncOptions) > 0 {
		policy["syncOptions"] = toAnySlice(a.SyncOptions)
	}
	meta := map[string]any{"name": a.Name, "namespace": ArgoCDNamespace}
	if a.ServerSideDiff {
		meta["annotations"] = map[string]any{"argocd.argoproj.io/compare-options": "ServerSideDiff=true"}
	}
	spec := map[string]any{
		"project":     "default",
		"source":      map[string]any{"repoURL": a.RepoURL, "path": a.Path, "targetRevision": "main"},
		"destination": map[string]any{"server": InClusterServer, "namespace": a.Namespace},
		"syncPolicy":  policy,
	}
	if len(a.IgnoreDifferences) > 0 {
		var l []any
		for _, d := range a.IgnoreDifferences {
			l = append(l, d)
		}
		spec["ignoreDifferences"] = l
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": meta, "spec": spec,
	}}
}
