// Package k8stest runs a real Kubernetes API server for the tests of
// k8smaglev: kube-apiserver v1.37.2, built from k8s.io/kubernetes by the
// go command (a tool of this module), on Debian's etcd, inside a network
// namespace the test binary creates for itself. It is a test-only module,
// so that k8smaglev's users never download Kubernetes' server code.
//
// A test package calls Main from its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(k8stest.Main(m)) }
//
// Main builds kube-apiserver (once; the go command caches it), then runs
// the tests in a copy of the test binary started in a new network
// namespace, with 198.18.0.1 (from 198.18.0.0/15, the benchmarking range)
// on its loopback interface: the API server rejects endpoint addresses in
// 127.0.0.0/8, so backends listen on 198.18.0.0/15 addresses (AddAddr).
// etcd, the API server and the backends are processes and sockets of
// that namespace, which the kernel removes when its last process exits:
// nothing is left behind, on failure too.
//
// Start returns the package's cluster, starting etcd and the API server at
// its first call; Main stops them after the tests. Without root, the ip
// command or etcd, the tests skip, naming what is missing (the Debian
// packages iproute2 and etcd-server); under CI=true they fail instead.
// With -short they skip.
package k8stest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The environment Main passes to the copy of the test binary it starts in
// a network namespace.
const (
	envInNetns     = "K8STEST_IN_NETNS"       // "1" in the copy
	envAPIServer   = "K8STEST_KUBE_APISERVER" // the built binary
	envUnavailable = "K8STEST_UNAVAILABLE"    // why the cluster cannot run, if it cannot
)

// The addresses of the namespace: the API server's, and etcd's.
const (
	APIServerIP = "198.18.0.1"
	apiPort     = "6443"
	etcdURL     = "http://127.0.0.1:2379"
)

// Main runs m's tests, in a new network namespace when the cluster can
// run, and returns the exit code for os.Exit.
func Main(m *testing.M) int {
	flag.Parse()
	if os.Getenv(envInNetns) == "1" {
		code := m.Run()
		stopShared()
		return code
	}
	if testing.Short() {
		return m.Run()
	}
	if why := missing(); why != "" {
		_ = os.Setenv(envUnavailable, why)
		return m.Run()
	}
	bin, err := buildAPIServer()
	if err != nil {
		_ = os.Setenv(envUnavailable, "!"+err.Error()) // "!": fails, even outside CI
		return m.Run()
	}
	// Pdeathsig is sent when the thread that started the child exits:
	// keep this one.
	runtime.LockOSThread()
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envInNetns+"=1", envAPIServer+"="+bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 0 {
			return ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "k8stest: running the tests in a network namespace: %v\n", err)
		return 1
	}
	return 0
}

// missing says what the cluster needs and this machine lacks, or "".
func missing() string {
	if os.Geteuid() != 0 {
		return "not root: the tests create a network namespace"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "ip is missing: install iproute2 (apt-get install iproute2)"
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		return "etcd is missing: install etcd-server (apt-get install etcd-server)"
	}
	return ""
}

// buildAPIServer builds this module's tool kube-apiserver (the go command
// caches the binary) and returns its path.
func buildAPIServer() (string, error) {
	gocmd := "go" // go test puts its own GOROOT/bin first in PATH
	start := time.Now()
	var stderr bytes.Buffer
	cmd := exec.Command(gocmd, "tool", "-n", "kube-apiserver")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("k8stest: go tool -n kube-apiserver: %v: %s", err, stderr.Bytes())
	}
	bin := strings.TrimSpace(string(out))
	if d := time.Since(start); d > 10*time.Second {
		fmt.Fprintf(os.Stderr, "k8stest: built kube-apiserver in %v\n", d.Round(time.Second))
	}
	return bin, nil
}

// need skips or fails t when the cluster cannot run.
func need(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no Kubernetes API server")
	}
	why := os.Getenv(envUnavailable)
	if strings.HasPrefix(why, "!") {
		t.Fatal(why[1:])
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	if os.Getenv(envInNetns) != "1" {
		t.Fatal("k8stest: the test package's TestMain does not call k8stest.Main")
	}
}

// A Cluster is etcd and a kube-apiserver in the test's network namespace.
type Cluster struct {
	dir        string // keys, tokens, the serving certificate, the logs
	adminToken string
	lbToken    string

	mu   sync.Mutex // guards etcd and api
	etcd *proc
	api  *proc
}

// A proc is a process the cluster started.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when it has exited
}

var (
	sharedMu sync.Mutex
	shared   *Cluster
)

// Start returns the package's cluster, starting it at the first call (a
// few seconds: etcd, then the API server until /readyz answers). It skips
// or fails t when the cluster cannot run (see the package doc).
func Start(t testing.TB) *Cluster {
	t.Helper()
	need(t)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		return shared
	}
	if err := setupNetns(); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "k8stest")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{dir: dir, adminToken: token(), lbToken: token()}
	if err := c.files(); err != nil {
		t.Fatal(err)
	}
	if err := c.startEtcd(); err != nil {
		t.Fatal(err)
	}
	shared = c
	start := time.Now()
	c.StartAPIServer(t)
	t.Logf("k8stest: etcd and kube-apiserver ready in %v", time.Since(start).Round(time.Millisecond))
	return c
}

// stopShared stops the package's cluster, if one started, and removes its
// files.
func stopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil {
		return
	}
	shared.mu.Lock()
	stop(shared.api)
	stop(shared.etcd)
	shared.mu.Unlock()
	_ = os.RemoveAll(shared.dir)
	shared = nil
}

// setupNetns brings the namespace's loopback up with APIServerIP on it.
func setupNetns() error {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("k8stest: ip link set lo up: %v: %s", err, out)
	}
	return addAddr(APIServerIP)
}

// AddAddr puts ip (from 198.18.0.0/15) on the namespace's loopback, so
// that a backend can listen on it. It may be called again for the same
// address. The namespace, and so the address, goes with the test binary.
func AddAddr(t testing.TB, ip string) {
	t.Helper()
	if !strings.HasPrefix(ip, "198.18.") && !strings.HasPrefix(ip, "198.19.") {
		t.Fatalf("k8stest: %s is not in 198.18.0.0/15", ip)
	}
	if err := addAddr(ip); err != nil {
		t.Fatal(err)
	}
}

func addAddr(ip string) error {
	if out, err := exec.Command("ip", "addr", "replace", ip+"/32", "dev", "lo").CombinedOutput(); err != nil {
		return fmt.Errorf("k8stest: ip addr replace %s/32 dev lo: %v: %s", ip, err, out)
	}
	return nil
}

func token() string {
	b := make([]byte, 16)
	rand.Read(b) //nolint:errcheck // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// files writes the service-account key pair and the token file: an admin
// in system:masters, and the user "lb", who has only the rights a
// Role grants it (see GrantEndpointSlices).
func (c *Cluster) files() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return err
	}
	tokens := fmt.Sprintf("%s,admin,admin,system:masters\n%s,lb,lb\n", c.adminToken, c.lbToken)
	return os.WriteFile(filepath.Join(c.dir, "tokens.csv"), []byte(tokens), 0o600)
}

func (c *Cluster) startEtcd() error {
	data := filepath.Join(c.dir, "etcd")
	cmd := exec.Command("etcd", "--name", "k8stest", "--data-dir", data,
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "k8stest=http://127.0.0.1:2380")
	p, err := c.spawn(cmd, "etcd.log")
	if err != nil {
		return err
	}
	c.etcd = p
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(etcdURL + "/health")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("k8stest: etcd not healthy within 30 s: %s", c.tail("etcd.log"))
}

// spawn starts cmd with its output in the log file, killed if the test
// binary dies.
func (c *Cluster) spawn(cmd *exec.Cmd, log string) (*proc, error) {
	f, err := os.OpenFile(filepath.Join(c.dir, log), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("k8stest: %s: %w", cmd.Path, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		cmd.Wait() //nolint:errcheck // its exit status does not matter
		close(p.exited)
	}()
	return p, nil
}

func (c *Cluster) tail(log string) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, log))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stop stops p (SIGTERM, then SIGKILL after 10 s) and waits for it to
// exit.
func stop(p *proc) {
	if p == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill() //nolint:errcheck // it may have exited
		<-p.exited
	}
}

// StartAPIServer starts the API server (again, after StopAPIServer, on
// the same etcd, address and certificate) and waits until /readyz
// answers 200.
func (c *Cluster) StartAPIServer(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.api != nil {
		t.Fatal("k8stest: the API server is running")
	}
	bin := os.Getenv(envAPIServer)
	cmd := exec.Command(bin,
		"--etcd-servers="+etcdURL,
		"--bind-address="+APIServerIP, "--advertise-address="+APIServerIP, "--secure-port="+apiPort,
		"--cert-dir="+filepath.Join(c.dir, "certs"),
		"--token-auth-file="+filepath.Join(c.dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-key-file="+filepath.Join(c.dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(c.dir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.96.0.0/16",
		// The API server advertises itself on a loopback address only
		// with no endpoint reconciler.
		"--endpoint-reconciler-type=none",
	)
	p, err := c.spawn(cmd, "kube-apiserver.log")
	if err != nil {
		t.Fatal(err)
	}
	c.api = p
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 2 * time.Second}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest("GET", "https://"+APIServerIP+":"+apiPort+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.adminToken)
		if resp, err := hc.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				hc.CloseIdleConnections()
				return
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("k8stest: kube-apiserver exited: %s", c.tail("kube-apiserver.log"))
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("k8stest: kube-apiserver not ready within 90 s: %s", c.tail("kube-apiserver.log"))
}

// StopAPIServer stops the API server (SIGTERM) and waits for it to exit;
// etcd keeps running, so a restart finds everything as it was.
func (c *Cluster) StopAPIServer(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.api == nil {
		t.Fatal("k8stest: the API server is not running")
	}
	stop(c.api)
	c.api = nil
}

// Config returns a client configuration for the admin user (in
// system:masters), or, if lb is true, for the user "lb", who may do only
// what GrantEndpointSlices grants. The API server's certificate is
// checked against the one it generated.
func (c *Cluster) Config(lb bool) *rest.Config {
	tok := c.adminToken
	if lb {
		tok = c.lbToken
	}
	return &rest.Config{
		Host:            "https://" + APIServerIP + ":" + apiPort,
		BearerToken:     tok,
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(c.dir, "certs", "apiserver.crt")},
		QPS:             100,
		Burst:           200,
	}
}

// Client returns a new admin client, with connections of its own.
func (c *Cluster) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config(false))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// LBClient returns a new client for the user "lb".
func (c *Cluster) LBClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config(true))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Kubeconfig writes a kubeconfig file for the user "lb" and returns its
// path, removed at the end of the test.
func (c *Cluster) Kubeconfig(t testing.TB) string {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(c.dir, "certs", "apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: k8stest
  cluster:
    server: https://%s:%s
    certificate-authority-data: %s
users:
- name: lb
  user:
    token: %s
contexts:
- name: k8stest
  context: {cluster: k8stest, user: lb}
current-context: k8stest
`, APIServerIP, apiPort, base64.StdEncoding.EncodeToString(ca), c.lbToken)
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Namespace creates a namespace with a unique name, deleted at the end of
// the test, and returns its name.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	name := "k8stest-" + token()[:10]
	cs := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}) //nolint:errcheck // the namespace goes with the netns anyway
	})
	return name
}

// GrantEndpointSlices gives the user "lb" what a Watcher needs in
// namespace ns, and nothing more: get, list and watch on endpointslices
// (a Role and a RoleBinding, as docs/kubernetes.md shows them).
func (c *Cluster) GrantEndpointSlices(t testing.TB, ns string) {
	t.Helper()
	cs := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "maglev-endpointslices"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"discovery.k8s.io"},
			Resources: []string{"endpointslices"},
			Verbs:     []string{"get", "list", "watch"},
		}},
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "maglev-endpointslices"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "lb"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
