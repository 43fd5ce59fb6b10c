package k8smaglev

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRESTConfig(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	const text = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://198.18.0.1:6443"}
users:
- name: u
  user: {token: secret}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`
	if err := os.WriteFile(kc, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("HOME", dir) // no ~/.kube/config
	t.Setenv("KUBECONFIG", "")

	// -kubeconfig, then $KUBECONFIG, as kubectl finds them.
	if c, err := RESTConfig(kc); err != nil || c.Host != "https://198.18.0.1:6443" || c.BearerToken != "secret" {
		t.Errorf("RESTConfig(%q) = %+v, %v", kc, c, err)
	}
	if _, err := RESTConfig(""); !errors.Is(err, ErrNoConfig) {
		t.Errorf("no kubeconfig anywhere: %v, want ErrNoConfig", err)
	}
	t.Setenv("KUBECONFIG", kc)
	if c, err := RESTConfig(""); err != nil || c.Host != "https://198.18.0.1:6443" {
		t.Errorf("$KUBECONFIG: %+v, %v", c, err)
	}
	if _, err := RESTConfig(filepath.Join(dir, "missing")); !errors.Is(err, ErrNoConfig) {
		t.Errorf("a missing -kubeconfig: %v, want ErrNoConfig", err)
	}
	// In a pod (KUBERNETES_SERVICE_HOST set) the service account wins
	// over $KUBECONFIG; here there is no token to read.
	t.Setenv("KUBERNETES_SERVICE_HOST", "198.18.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token"); err == nil {
		t.Skip("this machine has a service account token")
	}
	if _, err := RESTConfig(""); !errors.Is(err, ErrNoConfig) || !strings.HasPrefix(err.Error(), "k8smaglev: ") {
		t.Errorf("in a pod without its token: %v, want ErrNoConfig", err)
	}
	if c, err := RESTConfig(kc); err != nil || c.Host != "https://198.18.0.1:6443" {
		t.Errorf("-kubeconfig in a pod: %+v, %v", c, err)
	}
}
