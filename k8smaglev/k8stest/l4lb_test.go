package k8stest_test

// l4lb's Kubernetes controller (cmd/l4lb/internal/k8slb) against the
// real API server: two l4lb processes, each on one end of a veth pair of
// the test's namespace, read the cluster as a ServiceAccount that holds
// only the RBAC rules l4lb needs (l4lbRBAC). The leader gives Services of
// its class VIPs from the pool, within 2 s; the others are left alone;
// an exhausted pool leaves a Service pending with an event until an
// address frees; both l4lb program every served Service's ports with the
// nodes as backends; the leader killed, the other allocates, and no VIP
// in status moves.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/maglevlb/maglev/k8smaglev/k8stest"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// l4lbClass is the spec.loadBalancerClass l4lb serves by default.
const l4lbClass = "maglevlb.io/l4lb"

// buildL4LB builds cmd/l4lb, in its own module (go build -C), once per
// test binary (a link takes seconds), and returns the binary's path;
// TestMain removes it (removeL4LB).
func buildL4LB(t *testing.T) string {
	t.Helper()
	bin, err := builtL4LB()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

var (
	l4lbDir   string // where builtL4LB builds, once it has
	builtL4LB = sync.OnceValues(func() (string, error) {
		dir, err := os.MkdirTemp("", "k8stest-l4lb")
		if err != nil {
			return "", err
		}
		l4lbDir = dir
		bin := filepath.Join(dir, "l4lb")
		if out, err := exec.Command("go", "build", "-C", "../../cmd/l4lb", "-o", bin, ".").CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build l4lb: %v: %s", err, out)
		}
		return bin, nil
	})
)

// removeL4LB removes the binary buildL4LB built, if it did.
func removeL4LB() {
	if l4lbDir != "" {
		_ = os.RemoveAll(l4lbDir)
	}
}

// l4lbRBAC returns what l4lb's controller needs, for the ServiceAccount
// sa of namespace ns, whose Lease is in ns too, and nothing more: a
// ClusterRole (Services read, their status written, EndpointSlices and
// nodes read, events written) and its binding, and a Role on Leases in
// the Lease's namespace and its binding. The cluster's objects are named
// after ns.
func l4lbRBAC(ns, sa string) (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding, *rbacv1.Role, *rbacv1.RoleBinding) {
	name := "l4lb-" + ns
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"update", "patch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}
	r := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "l4lb-lease"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "l4lb-lease"}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name}}
	return cr, crb, r, rb
}

// l4lbKubeconfig creates the ServiceAccount l4lb in ns, grants it
// l4lbRBAC (the cluster's objects deleted at the end of the test), and
// returns the path of a kubeconfig with a token of it.
func l4lbKubeconfig(t *testing.T, c *k8stest.Cluster, ns string) string {
	t.Helper()
	cs := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "l4lb"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cr, crb, r, rb := l4lbRBAC(ns, "l4lb")
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cs.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{}) //nolint:errcheck // goes with the API server anyway
		cs.RbacV1().ClusterRoles().Delete(ctx, cr.Name, metav1.DeleteOptions{})         //nolint:errcheck // as above
	})
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "l4lb", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: k8stest
  cluster: {server: %q, certificate-authority: %q}
users:
- name: l4lb
  user: {token: %q}
contexts:
- name: k8stest
  context: {cluster: k8stest, user: l4lb}
current-context: k8stest
`, c.Config(false).Host, c.Config(false).CAFile, tok.Status.Token)
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// vethPair creates the veth pair a, b in the test's namespace, up,
// removed at the end of the test (and with the namespace, on failure).
func vethPair(t *testing.T, a, b string) {
	t.Helper()
	for _, args := range [][]string{{"link", "add", a, "type", "veth", "peer", "name", b}, {"link", "set", a, "up"}, {"link", "set", b, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", a).Run() }) //nolint:errcheck // gone with the namespace anyway
}

// An l4lbProc is an l4lb run in the test's namespace, its log records
// (JSON) kept.
type l4lbProc struct {
	cmd   *exec.Cmd
	admin string
	done  chan struct{} // closed when it has exited

	mu      sync.Mutex // guards records
	records []map[string]any
}

// startL4LB runs bin run -config file; at the end of the test it is
// killed if still running, and its records logged if the test failed.
func startL4LB(t *testing.T, bin, file, admin string) *l4lbProc {
	t.Helper()
	p := &l4lbProc{cmd: exec.Command(bin, "run", "-config", file), admin: admin, done: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var raw strings.Builder
	go func() {
		defer close(p.done)
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			var r map[string]any
			_ = json.Unmarshal(s.Bytes(), &r)
			p.mu.Lock()
			raw.WriteString(s.Text() + "\n")
			p.records = append(p.records, r)
			p.mu.Unlock()
		}
		p.cmd.Wait() //nolint:errcheck // killed, or failed: its records say
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill() //nolint:errcheck // it may have exited
		<-p.done
		if t.Failed() {
			t.Logf("l4lb %s:\n%s", file, raw.String())
		}
	})
	return p
}

// logged reports whether p logged a record with the message msg.
func (p *l4lbProc) logged(msg string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.ContainsFunc(p.records, func(r map[string]any) bool { return r["msg"] == msg })
}

// l4lbFile writes l4lb's configuration file: the controller's settings,
// no service of its own, and returns its path.
func l4lbFile(t *testing.T, iface, admin, kubeconfig, lease string, pool ...string) string {
	t.Helper()
	f := fmt.Sprintf("iface: %s\nmode: generic\npin-dir: \"\"\nadmin: %s\nlog-format: json\nkubeconfig: %s\nk8s-lease: %s\nvip-pool: [%s]\nservices: []\n",
		iface, admin, kubeconfig, lease, strings.Join(pool, ", "))
	p := filepath.Join(t.TempDir(), "l4lb-"+iface+".yaml")
	if err := os.WriteFile(p, []byte(f), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// createNodes creates Ready nodes, each with one InternalIP, deleted at
// the end of the test.
func createNodes(t *testing.T, cs kubernetes.Interface, ips map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, ip := range ips {
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}) //nolint:errcheck // goes with the API server anyway
		})
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// lbService creates the Service ns/name of type typ (LoadBalancer with
// class, if not ""), port 80 named http, deleted at the end of the test.
func lbService(t *testing.T, cs kubernetes.Interface, ns, name string, typ corev1.ServiceType, class string) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
		Type: typ, Selector: map[string]string{"app": name},
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
	}}
	if class != "" {
		svc.Spec.LoadBalancerClass = &class
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cs.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}) //nolint:errcheck // it may be gone
	})
}

// ingress returns the IPs in the status of the Service ns/name, each
// with its ipMode ("1.2.3.4/VIP"); nil if it has none or is gone.
func ingress(t *testing.T, cs kubernetes.Interface, ns, name string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	svc, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		mode := "none"
		if in.IPMode != nil {
			mode = string(*in.IPMode)
		}
		out = append(out, in.IP+"/"+mode)
	}
	return out
}

// eventually polls cond every 10 ms until it holds, and returns how long
// that took; it fails t after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// hasEvent reports whether the Service ns/name has an event of reason
// from l4lb, whose message has each of the strings in.
func hasEvent(t *testing.T, cs kubernetes.Interface, ns, name, reason string, in ...string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(evs.Items, func(e corev1.Event) bool {
		return e.Source.Component == "l4lb" && !slices.ContainsFunc(in, func(s string) bool { return !strings.Contains(e.Message, s) })
	})
}

// l4lbServices returns the services l4lb status -json shows at admin,
// each "NAME SERVICE BACKEND,BACKEND..." of its backends not down,
// sorted, and their health checks by name.
func l4lbServices(t *testing.T, bin, admin string) ([]string, map[string]string) {
	t.Helper()
	out, err := exec.Command(bin, "status", "-admin", admin, "-json").Output()
	if err != nil {
		t.Fatalf("l4lb status: %v", err)
	}
	var r struct {
		Services []struct {
			Name, Service, Health string
			Backends              []struct{ Addr, State string }
		}
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("l4lb status -json: %v: %s", err, out)
	}
	var s []string
	health := map[string]string{}
	for _, svc := range r.Services {
		health[svc.Name] = svc.Health
		var bs []string
		for _, b := range svc.Backends {
			if b.State != "down" { // a node out of service is a Down backend
				bs = append(bs, b.Addr)
			}
		}
		slices.Sort(bs)
		s = append(s, svc.Name+" "+svc.Service+" "+strings.Join(bs, ","))
	}
	slices.Sort(s)
	return s, health
}

// deleteStray deletes the Services of l4lb's class that tests before
// left (the API server has no namespace controller: a namespace deleted
// keeps its objects), so that they hold no address of the pool.
func deleteStray(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Items {
		if s.Spec.LoadBalancerClass != nil && *s.Spec.LoadBalancerClass == l4lbClass {
			t.Logf("deleting %s/%s, of class %s, left by a test before", s.Namespace, s.Name, l4lbClass)
			if err := cs.CoreV1().Services(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
}

func TestL4LBController(t *testing.T) {
	if e2eRace() {
		t.Skip("runs l4lb built without -race: the plain run covers it")
	}
	c := k8stest.Start(t)
	bin := buildL4LB(t)
	cs := c.Client(t)
	deleteStray(t, cs)
	ns := c.Namespace(t)
	kc := l4lbKubeconfig(t, c, ns)
	pid := os.Getpid()
	nodes := map[string]string{fmt.Sprintf("l4lb-n1-%d", pid): "198.18.40.11", fmt.Sprintf("l4lb-n2-%d", pid): "198.18.40.12", fmt.Sprintf("l4lb-n3-%d", pid): "198.18.40.13"}
	createNodes(t, cs, nodes)
	a, b := fmt.Sprintf("lba%d", pid), fmt.Sprintf("lbb%d", pid)
	vethPair(t, a, b)
	// Two addresses: 198.19.40.0 and .3 are the network's and broadcast.
	const pool = "198.19.40.0/30"
	lease := ns + "/l4lb-vip-allocator"
	lbA := startL4LB(t, bin, l4lbFile(t, a, "127.0.0.1:9281", kc, lease, pool), "127.0.0.1:9281")
	eventually(t, 30*time.Second, "l4lb A leading", func() bool { return lbA.logged("k8s: leading, allocating VIPs") })
	lbB := startL4LB(t, bin, l4lbFile(t, b, "127.0.0.1:9282", kc, lease, pool), "127.0.0.1:9282")
	eventually(t, 30*time.Second, "l4lb B following", func() bool { return lbB.logged("k8s: another l4lb leads") })

	// A Service of the class gets the pool's first address, in status
	// within 2 s; one of another class and a ClusterIP one none.
	lbService(t, cs, ns, "other", corev1.ServiceTypeLoadBalancer, "example.com/lb")
	lbService(t, cs, ns, "cip", corev1.ServiceTypeClusterIP, "")
	lbService(t, cs, ns, "web", corev1.ServiceTypeLoadBalancer, l4lbClass)
	took := eventually(t, 2*time.Second, "web's VIP in status", func() bool { return len(ingress(t, cs, ns, "web")) > 0 })
	t.Logf("web's VIP in status %v after its creation", took.Round(time.Millisecond))
	if got := ingress(t, cs, ns, "web"); !slices.Equal(got, []string{"198.19.40.1/VIP"}) {
		t.Fatalf("web's status: %v, want [198.19.40.1/VIP]", got)
	}
	eventually(t, 5*time.Second, "web's IPAllocated event", func() bool { return hasEvent(t, cs, ns, "web", "IPAllocated") })

	// The pool exhausted: the next stays pending, with an event, and gets
	// the address freed when a Service is deleted.
	lbService(t, cs, ns, "api", corev1.ServiceTypeLoadBalancer, l4lbClass)
	eventually(t, 2*time.Second, "api's VIP in status", func() bool { return len(ingress(t, cs, ns, "api")) > 0 })
	lbService(t, cs, ns, "late", corev1.ServiceTypeLoadBalancer, l4lbClass)
	took = eventually(t, 5*time.Second, "late's AllocationFailed event", func() bool { return hasEvent(t, cs, ns, "late", "AllocationFailed") })
	t.Logf("late's AllocationFailed event %v after its creation", took.Round(time.Millisecond))
	if got := ingress(t, cs, ns, "late"); got != nil {
		t.Fatalf("late's status with the pool exhausted: %v", got)
	}
	// Both l4lb program the Services in status, the nodes their backends.
	want := []string{
		fmt.Sprintf("k8s/%s/api/http tcp/198.19.40.2:80 198.18.40.11,198.18.40.12,198.18.40.13", ns),
		fmt.Sprintf("k8s/%s/web/http tcp/198.19.40.1:80 198.18.40.11,198.18.40.12,198.18.40.13", ns),
	}
	for _, p := range []*l4lbProc{lbA, lbB} {
		eventually(t, 5*time.Second, "l4lb status at "+p.admin, func() bool {
			got, _ := l4lbServices(t, bin, p.admin)
			return slices.Equal(got, want)
		})
	}
	checkReload(t, bin, lbB, want)
	checkDelete(t, cs, ns, "web", "late", "198.19.40.1/VIP")
	checkTypeChange(t, cs, ns, "api", "198.19.40.2/VIP")
	checkFailover(t, cs, ns, lbA, lbB, map[string]string{"late": "198.19.40.1/VIP"})
	checkLocal(t, cs, bin, ns, lbB, nodes)
	checkAnnotations(t, cs, bin, ns, lbB)
	for _, name := range []string{"other", "cip"} {
		if got := ingress(t, cs, ns, name); got != nil || hasEvent(t, cs, ns, name, "IPAllocated") || hasEvent(t, cs, ns, name, "AllocationFailed") {
			t.Errorf("%s, not l4lb's: status %v, or an event of l4lb", name, got)
		}
	}
}

// checkDelete deletes the Service gone and checks that pending gets its
// address, want, within 2 s.
func checkDelete(t *testing.T, cs kubernetes.Interface, ns, gone, pending, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cs.CoreV1().Services(ns).Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 2*time.Second, pending+"'s VIP once "+gone+" is deleted", func() bool { return len(ingress(t, cs, ns, pending)) > 0 })
	if got := ingress(t, cs, ns, pending); !slices.Equal(got, []string{want}) {
		t.Fatalf("%s's status: %v, want [%s]", pending, got, want)
	}
	t.Logf("%s's VIP in status %v after %s's deletion", pending, took.Round(time.Millisecond), gone)
}

// checkTypeChange makes the Service name, at want, a ClusterIP one, and
// checks that its address is free: a new Service of the class gets it.
func checkTypeChange(t *testing.T, cs kubernetes.Interface, ns, name, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Type, svc.Spec.LoadBalancerClass = corev1.ServiceTypeClusterIP, nil
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].NodePort = 0
	}
	if _, err := cs.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	lbService(t, cs, ns, "next", corev1.ServiceTypeLoadBalancer, l4lbClass)
	eventually(t, 2*time.Second, "next's VIP once "+name+" is ClusterIP", func() bool { return len(ingress(t, cs, ns, "next")) > 0 })
	if got := ingress(t, cs, ns, "next"); !slices.Equal(got, []string{want}) {
		t.Fatalf("next's status: %v, want [%s], %s's", got, want, name)
	}
	if got := ingress(t, cs, ns, name); got != nil {
		t.Fatalf("%s, now ClusterIP: status %v", name, got)
	}
}

// checkFailover kills the leader, a, and checks that b takes over: a new
// Service gets the address freed, and the VIPs in status, kept, stay.
func checkFailover(t *testing.T, cs kubernetes.Interface, ns string, a, b *l4lbProc, kept map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cs.CoreV1().Services(ns).Delete(ctx, "next", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	killed := time.Now()
	lbService(t, cs, ns, "after", corev1.ServiceTypeLoadBalancer, l4lbClass)
	eventually(t, 20*time.Second, "after's VIP from the new leader", func() bool { return len(ingress(t, cs, ns, "after")) > 0 })
	t.Logf("the leader killed, the other gave a new Service its VIP %v later", time.Since(killed).Round(time.Millisecond))
	if !b.logged("k8s: leading, allocating VIPs") {
		t.Error("l4lb B gave the VIP without logging that it leads")
	}
	if got := ingress(t, cs, ns, "after"); !slices.Equal(got, []string{"198.19.40.2/VIP"}) {
		t.Errorf("after's status: %v, want [198.19.40.2/VIP]", got)
	}
	for name, want := range kept {
		if got := ingress(t, cs, ns, name); !slices.Equal(got, []string{want}) {
			t.Errorf("%s's status after the new leader: %v, want [%s] as before", name, got, want)
		}
	}
}

// checkReload adds a service of its own to p's file and reloads it
// (SIGHUP): the Services' services stay, beside the file's.
func checkReload(t *testing.T, bin string, p *l4lbProc, k8s []string) {
	t.Helper()
	f := p.cmd.Args[len(p.cmd.Args)-1]
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	own := "services:\n  - name: own\n    vip: 198.19.41.1:80\n    backends: [198.18.40.11]\n"
	if err := os.WriteFile(f, []byte(strings.Replace(string(b), "services: []\n", own, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	want := append([]string{"own tcp/198.19.41.1:80 198.18.40.11"}, k8s...)
	slices.Sort(want)
	eventually(t, 5*time.Second, "the file's service and the Services' after a reload", func() bool {
		got, _ := l4lbServices(t, bin, p.admin)
		return slices.Equal(got, want) && p.logged("reloaded")
	})
}

// checkLocal frees an address, and checks that a Service of
// externalTrafficPolicy Local has as backends the nodes with a ready
// endpoint of it alone, health checked on its healthCheckNodePort.
func checkLocal(t *testing.T, cs kubernetes.Interface, bin, ns string, p *l4lbProc, nodes map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cs.CoreV1().Services(ns).Delete(ctx, "after", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	class := l4lbClass
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var onNode []string // the nodes with an endpoint, the first ready
	for n := range nodes {
		onNode = append(onNode, n)
	}
	slices.Sort(onNode)
	yes, no := true, false
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "local-1", Labels: map[string]string{discoveryv1.LabelServiceName: "local"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.1.0.1"}, NodeName: &onNode[1], Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
			{Addresses: []string{"10.1.0.2"}, NodeName: &onNode[2], Conditions: discoveryv1.EndpointConditions{Ready: &no}},
		},
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := "k8s/" + ns + "/local/http"
	want := name + " tcp/198.19.40.2:80 " + nodes[onNode[1]]
	var health map[string]string
	eventually(t, 5*time.Second, "the Local Service's node", func() bool {
		var got []string
		got, health = l4lbServices(t, bin, p.admin)
		return slices.Contains(got, want)
	})
	if h := fmt.Sprintf("http GET /healthz = 200 on port %d ", svc.Spec.HealthCheckNodePort); !strings.HasPrefix(health[name], h) {
		t.Errorf("the Local Service's health check: %q, want %q...", health[name], h)
	}
}

// annotate sets the annotations of the Service ns/name (a value "" takes
// one away).
func annotate(t *testing.T, cs kubernetes.Interface, ns, name string, kv map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	for k, v := range kv {
		if v == "" {
			delete(svc.Annotations, k)
			continue
		}
		svc.Annotations[k] = v
	}
	if _, err := cs.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkAnnotations: a Service that asks for an address another has keeps
// its own, with an AllocationFailed event; one whose annotation makes no
// service, or a service the data plane refuses, is not served, with an
// InvalidSettings event, its VIP kept, the others served, and it is
// served again once the annotations are right.
func checkAnnotations(t *testing.T, cs kubernetes.Interface, bin, ns string, p *l4lbProc) {
	t.Helper()
	annotate(t, cs, ns, "local", map[string]string{"l4lb.maglevlb.io/ip": "198.19.40.1"})
	eventually(t, 5*time.Second, "local's AllocationFailed event, asking for late's VIP", func() bool {
		return hasEvent(t, cs, ns, "local", "AllocationFailed", "198.19.40.1", "/late's")
	})
	for name, want := range map[string]string{"local": "198.19.40.2/VIP", "late": "198.19.40.1/VIP"} {
		if got := ingress(t, cs, ns, name); !slices.Equal(got, []string{want}) {
			t.Errorf("%s's status: %v, want [%s] as before", name, got, want)
		}
	}
	served := func(name string) bool {
		got, _ := l4lbServices(t, bin, p.admin)
		return slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "k8s/"+ns+"/"+name+"/http ") })
	}
	for _, tc := range []struct{ forward, event string }{
		{"pigeon", `-forward "pigeon": l2, ipip or gue`},
		{"ipip", "no global IPv4 address to encapsulate from"}, // the interface has none: the data plane refuses it
	} {
		annotate(t, cs, ns, "late", map[string]string{"l4lb.maglevlb.io/forward": tc.forward})
		eventually(t, 5*time.Second, "late's InvalidSettings event with forward "+tc.forward, func() bool {
			return hasEvent(t, cs, ns, "late", "InvalidSettings", tc.event)
		})
		eventually(t, 5*time.Second, "late not served with forward "+tc.forward, func() bool { return !served("late") })
		if got := ingress(t, cs, ns, "late"); !slices.Equal(got, []string{"198.19.40.1/VIP"}) || !served("local") {
			t.Errorf("late's status with forward %s: %v, want [198.19.40.1/VIP]; local served: %v", tc.forward, got, served("local"))
		}
	}
	annotate(t, cs, ns, "late", map[string]string{"l4lb.maglevlb.io/forward": "", "l4lb.maglevlb.io/m": "251"})
	eventually(t, 5*time.Second, "late served again", func() bool { return served("late") })
}
