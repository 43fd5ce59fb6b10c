package k8stest_test

// The manifests under deploy/ against the real API server: every object
// decoded by client-go's scheme (strictly: a field the API does not have
// is an error), created as kubectl apply would create it, and read back
// with every field the manifest sets; then the RBAC they grant, asked of
// the API server's authorizer: the ServiceAccount l4lb-system:l4lb may
// do what the controller does and nothing more, l4lb-system:l4lb-decap
// nothing.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/k8smaglev/k8stest"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// deployDir is the repository's deploy/, from this package's folder.
const deployDir = "../../deploy"

// The identities the manifests grant to, as the API server names a
// ServiceAccount's requests.
const (
	deployNS           = "l4lb-system"
	l4lbSA             = "system:serviceaccount:l4lb-system:l4lb"
	decapSA            = "system:serviceaccount:l4lb-system:l4lb-decap"
	nobodySA           = "system:serviceaccount:l4lb-system:nobody" // bound to nothing: what every account may do
	deployLease        = "l4lb-vip-allocator"
	deployOtherNS      = "default" // a namespace of Services, where the lease's Role does not reach
	deployFieldManager = "k8stest-deploy"
	rbacPropagate      = 10 * time.Second // the authorizer's caches follow new bindings within this
)

// A deployObject is one object of a file under deploy/: as the file has it
// (what is created, and what must read back), and its kind.
type deployObject struct {
	where string // FILE#N, for messages
	obj   *unstructured.Unstructured
}

// deployManifests decodes every document of every YAML file under
// deploy/, in the files' order (kubectl apply's), each strictly by
// client-go's scheme: an unknown kind or field fails t.
func deployManifests(t *testing.T) []deployObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no deployObject in %s", deployDir)
	}
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var ms []deployObject
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for n := 1; ; n++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: document %d: %v", f, n, err)
			}
			if len(bytes.TrimSpace(deployStripComments(doc))) == 0 {
				continue
			}
			where := fmt.Sprintf("%s#%d", filepath.Base(f), n)
			if _, _, err := strict.Decode(doc, nil, nil); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			js, err := utilyaml.ToJSON(doc)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(js); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			ms = append(ms, deployObject{where: where, obj: u})
		}
	}
	return ms
}

// TestDeploy creates every object of deploy/ and reads it back, has the
// API server admit a pod of each DaemonSet, then asks the authorizer
// what the ServiceAccounts they make may do.
func TestDeploy(t *testing.T) {
	c := k8stest.Start(t)
	cfg := c.Config(false)
	cs := c.Client(t)
	start := time.Now()
	ms := deployManifests(t)
	kinds := map[string]int{}
	for _, m := range ms {
		kinds[m.obj.GetKind()]++
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "DaemonSet"} {
		if kinds[k] == 0 {
			t.Errorf("deploy/ has no %s (kinds: %v)", k, kinds)
		}
	}
	if kinds["DaemonSet"] != 2 || kinds["ServiceAccount"] != 2 {
		t.Errorf("deploy/ has %d DaemonSets and %d ServiceAccounts, want 2 of each (l4lb, l4lb-decap)", kinds["DaemonSet"], kinds["ServiceAccount"])
	}
	parent := t
	t.Run("objects", func(t *testing.T) { deployCreate(t, parent, cfg, cs, ms) })
	if t.Failed() {
		return
	}
	t.Run("pods", func(t *testing.T) { deployAdmit(t, c, cs, ms) })
	t.Run("rbac", func(t *testing.T) { deployCheckRBAC(t, cfg, cs) })
	if !t.Failed() {
		t.Logf("%d objects created and read back, their pods admitted, RBAC checked, in %v", len(ms), time.Since(start).Round(time.Millisecond))
	}
}

// deployCreate creates each object as the manifest has it, with the
// API server's strict field validation, reads it back, and checks that
// every field the manifest sets has the manifest's value. The objects
// are deleted at the end of the parent test, but for the namespace: with no
// namespace controller in this cluster it would never finish
// terminating, so it stays for the binary's life, and a second run (or
// another test) finds it and applies the manifest's over it.
func deployCreate(t, parent *testing.T, cfg *rest.Config, cs kubernetes.Interface, ms []deployObject) {
	groups, err := restmapper.GetAPIGroupResources(cs.Discovery())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range ms {
		gvk := m.obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %s: %v", m.where, gvk, err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if m.obj.GetNamespace() == "" {
				t.Fatalf("%s: %s %s has no namespace", m.where, gvk.Kind, m.obj.GetName())
			}
			ri = dyn.Resource(mapping.Resource).Namespace(m.obj.GetNamespace())
		}
		name := m.obj.GetName()
		_, err = ri.Create(ctx, m.obj.DeepCopy(), metav1.CreateOptions{FieldValidation: "Strict", FieldManager: deployFieldManager})
		switch {
		case err == nil && gvk.Kind != "Namespace":
			parent.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := ri.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					parent.Errorf("deleting %s %s: %v", gvk.Kind, name, err)
				}
			})
		case err == nil:
		case apierrors.IsAlreadyExists(err) && gvk.Kind == "Namespace":
			js, jerr := m.obj.MarshalJSON()
			if jerr != nil {
				t.Fatal(jerr)
			}
			force := true
			if _, err := ri.Patch(ctx, name, types.ApplyPatchType, js, metav1.PatchOptions{FieldManager: deployFieldManager, Force: &force, FieldValidation: "Strict"}); err != nil {
				t.Fatalf("%s: applying Namespace %s over the one there: %v", m.where, name, err)
			}
		default:
			t.Fatalf("%s: creating %s %s: %v", m.where, gvk.Kind, name, err)
		}
		got, err := ri.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: reading %s %s back: %v", m.where, gvk.Kind, name, err)
		}
		if path, ok := fieldsMatch(got.Object, m.obj.Object, ""); !ok {
			t.Errorf("%s: %s %s read back differs at %s", m.where, gvk.Kind, name, path)
		}
	}
}

// deployAdmit has the API server admit (a dry run: admitted, not kept)
// a pod of each DaemonSet's template in its namespace, as the
// DaemonSet's controller would create it: its ServiceAccount exists, and
// the namespace's Pod Security level allows its host network, host
// paths and capabilities. The same pod in a namespace at the baseline
// level must be refused, or the check proves nothing.
func deployAdmit(t *testing.T, c *k8stest.Cluster, cs kubernetes.Interface, ms []deployObject) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	baseline := c.Namespace(t)
	patch := []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"baseline"}}}`)
	if _, err := cs.CoreV1().Namespaces().Patch(ctx, baseline, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	for _, m := range ms {
		if m.obj.GetKind() != "DaemonSet" {
			continue
		}
		var ds appsv1.DaemonSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.obj.Object, &ds); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-admitted", Namespace: ds.Namespace, Labels: ds.Spec.Template.Labels},
			Spec:       *ds.Spec.Template.Spec.DeepCopy(),
		}
		if _, err := cs.CoreV1().Pods(ds.Namespace).Create(ctx, pod, dryRun); err != nil {
			t.Errorf("%s: a pod of DaemonSet %s is not admitted: %v", m.where, ds.Name, err)
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: pod.Spec.ServiceAccountName}}
		if _, err := cs.CoreV1().ServiceAccounts(baseline).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		pod.Namespace = baseline
		_, err := cs.CoreV1().Pods(baseline).Create(ctx, pod, dryRun)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
			t.Errorf("a pod of DaemonSet %s in a namespace at the baseline level: %v, want refused by PodSecurity", ds.Name, err)
		}
	}
}

// fieldsMatch reports whether got has every field of want with want's value
// (maps: each of want's keys; lists: the same length, each item
// containing want's), and if not, the path of the first that differs.
// What the API server adds (defaults, metadata) is not compared.
func fieldsMatch(got, want any, path string) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path, false
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if p, ok := fieldsMatch(g[k], w[k], path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s (%d items, want %d)", path, len(g), len(w)), false
		}
		for i := range w {
			if p, ok := fieldsMatch(g[i], w[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	default:
		if !reflect.DeepEqual(got, want) {
			return fmt.Sprintf("%s: %v, want %v", path, got, want), false
		}
		return "", true
	}
}

// An rbacAccess is one request's attributes, as an authorization check asks
// them: VERB GROUP/RESOURCE[/SUBRESOURCE] in NAMESPACE ("" for every
// namespace, or a cluster-scoped resource).
type rbacAccess struct {
	verb, group, resource, sub, ns, name string
}

func (a rbacAccess) String() string {
	r := a.resource
	if a.sub != "" {
		r += "/" + a.sub
	}
	if a.group != "" {
		r = a.group + "/" + r
	}
	where := "the cluster (every namespace)"
	if a.ns != "" {
		where = "namespace " + a.ns
	}
	return fmt.Sprintf("%s %s in %s", a.verb, r, where)
}

// The controller's rights (the agreed design), each asked as it uses
// them: Services and EndpointSlices watched in every namespace, status
// and events written in the Service's, the Lease in l4lb-system.
var deployAllowed = []rbacAccess{
	{verb: "get", resource: "services", ns: deployOtherNS},
	{verb: "list", resource: "services"},
	{verb: "watch", resource: "services"},
	{verb: "update", resource: "services", sub: "status", ns: deployOtherNS},
	{verb: "patch", resource: "services", sub: "status", ns: deployOtherNS},
	{verb: "list", group: "discovery.k8s.io", resource: "endpointslices"},
	{verb: "watch", group: "discovery.k8s.io", resource: "endpointslices"},
	{verb: "list", resource: "nodes"},
	{verb: "watch", resource: "nodes"},
	{verb: "create", resource: "events", ns: deployOtherNS},
	{verb: "patch", resource: "events", ns: deployOtherNS},
	{verb: "get", group: "coordination.k8s.io", resource: "leases", ns: deployNS, name: deployLease},
	{verb: "create", group: "coordination.k8s.io", resource: "leases", ns: deployNS},
	{verb: "update", group: "coordination.k8s.io", resource: "leases", ns: deployNS, name: deployLease},
}

// A sample of what neither ServiceAccount may do.
var deployDenied = []rbacAccess{
	{verb: "get", resource: "secrets", ns: deployNS},
	{verb: "list", resource: "secrets"},
	{verb: "get", resource: "configmaps", ns: deployNS},
	{verb: "create", resource: "services", ns: deployOtherNS},
	{verb: "update", resource: "services", ns: deployOtherNS},
	{verb: "patch", resource: "services", ns: deployOtherNS},
	{verb: "delete", resource: "services", ns: deployOtherNS},
	{verb: "list", resource: "pods"},
	{verb: "get", resource: "nodes"},
	{verb: "update", resource: "nodes"},
	{verb: "patch", resource: "nodes", sub: "status"},
	{verb: "create", group: "discovery.k8s.io", resource: "endpointslices", ns: deployOtherNS},
	{verb: "delete", resource: "events", ns: deployOtherNS},
	{verb: "create", group: "events.k8s.io", resource: "events", ns: deployOtherNS}, // l4lb writes core events
	{verb: "get", group: "coordination.k8s.io", resource: "leases", ns: "kube-system"},
	{verb: "update", group: "coordination.k8s.io", resource: "leases", ns: deployOtherNS},
	{verb: "delete", group: "coordination.k8s.io", resource: "leases", ns: deployNS, name: deployLease},
	{verb: "list", group: "coordination.k8s.io", resource: "leases", ns: deployNS},
	{verb: "update", group: "rbac.authorization.k8s.io", resource: "clusterroles"},
	{verb: "create", group: "apps", resource: "daemonsets", ns: deployNS},
}

// deployCheckRBAC asks the authorizer (SubjectAccessReview) about every right
// of deployAllowed and deployDenied, for l4lb and for l4lb-decap; then it
// lists the rules l4lb has in a namespace beyond those of a
// ServiceAccount bound to nothing (SelfSubjectRulesReview, as l4lb and
// as that account), and wants exactly the design's.
func deployCheckRBAC(t *testing.T, cfg *rest.Config, cs kubernetes.Interface) {
	// The authorizer learns of new bindings from its caches: wait until
	// a right of each binding (the ClusterRole's, the Role's) is there
	// before believing any answer.
	cluster, lease := deployAllowed[0], rbacAccess{verb: "get", group: "coordination.k8s.io", resource: "leases", ns: deployNS, name: deployLease}
	deadline := time.Now().Add(rbacPropagate)
	for !rbacAllowed(t, cs, l4lbSA, cluster) || !rbacAllowed(t, cs, l4lbSA, lease) {
		if time.Now().After(deadline) {
			t.Fatalf("%s may not %s, or not %s, %v after the bindings were made", l4lbSA, cluster, lease, rbacPropagate)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, a := range deployAllowed {
		if !rbacAllowed(t, cs, l4lbSA, a) {
			t.Errorf("%s may not %s", l4lbSA, a)
		}
		if rbacAllowed(t, cs, decapSA, a) {
			t.Errorf("%s may %s", decapSA, a)
		}
	}
	for _, a := range deployDenied {
		if rbacAllowed(t, cs, l4lbSA, a) {
			t.Errorf("%s may %s", l4lbSA, a)
		}
	}
	want := map[string][]string{
		deployNS: {
			"/events create", "/events patch", "/nodes list", "/nodes watch",
			"/services get", "/services list", "/services watch",
			"/services/status patch", "/services/status update",
			"coordination.k8s.io/leases create", "coordination.k8s.io/leases get", "coordination.k8s.io/leases update",
			"discovery.k8s.io/endpointslices list", "discovery.k8s.io/endpointslices watch",
		},
	}
	want[deployOtherNS] = slices.DeleteFunc(slices.Clone(want[deployNS]), func(r string) bool { return strings.HasPrefix(r, "coordination.k8s.io/") })
	for _, ns := range []string{deployNS, deployOtherNS} {
		base := rbacRules(t, cfg, nobodySA, ns)
		var got []string
		for r := range rbacRules(t, cfg, l4lbSA, ns) {
			if !base[r] {
				got = append(got, r)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want[ns]) {
			t.Errorf("%s's rules in namespace %s, beyond every account's:\n\t%s\nwant\n\t%s", l4lbSA, ns, strings.Join(got, "\n\t"), strings.Join(want[ns], "\n\t"))
		}
		for r := range rbacRules(t, cfg, decapSA, ns) {
			if !base[r] {
				t.Errorf("%s has a rule in namespace %s beyond every account's: %s", decapSA, ns, r)
			}
		}
	}
}

// deploySAGroups are the groups the API server puts a ServiceAccount's requests
// in.
func deploySAGroups(user string) []string {
	ns := strings.Split(user, ":")[2]
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}

// rbacAllowed asks the API server's authorizer whether user may do a.
func rbacAllowed(t *testing.T, cs kubernetes.Interface, user string, a rbacAccess) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: deploySAGroups(user),
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: a.ns, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub, Name: a.name,
		},
	}}
	got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview of %s for %s: %v", user, a, err)
	}
	return got.Status.Allowed
}

// rbacRules returns the resource rules user has in namespace ns, as
// "GROUP/RESOURCE VERB", one a verb and resource, by a
// SelfSubjectRulesReview made as user (the admin impersonates it).
func rbacRules(t *testing.T, cfg *rest.Config, user, ns string) map[string]bool {
	t.Helper()
	imp := rest.CopyConfig(cfg)
	imp.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: deploySAGroups(user)}
	cs, err := kubernetes.NewForConfig(imp)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cs.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectRulesReview as %s in %s: %v", user, ns, err)
	}
	if r.Status.Incomplete {
		t.Fatalf("SelfSubjectRulesReview as %s in %s: incomplete: %s", user, ns, r.Status.EvaluationError)
	}
	out := map[string]bool{}
	for _, rr := range r.Status.ResourceRules {
		if len(rr.ResourceNames) > 0 {
			t.Errorf("%s has a rule limited to names %v in %s: the manifests name none", user, rr.ResourceNames, ns)
		}
		for _, g := range rr.APIGroups {
			for _, res := range rr.Resources {
				for _, v := range rr.Verbs {
					out[g+"/"+res+" "+v] = true
				}
			}
		}
	}
	return out
}

// deployStripComments returns doc without its comment lines, to tell a
// document of comments only (a file's header before its first ---) from
// an object.
func deployStripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// TestDeployConfig checks that the manifests agree with l4lb's file in
// the ConfigMap (l4lb decap's VIPs are the pool's addresses, its GUE
// port the file's, the probes ask the file's admin address, the pins
// and the state file are on the host paths mounted, the Lease is in
// the namespace the Role grants), and that l4lb check accepts the file,
// with a node's address for @NODE_IP@. It needs no API server.
func TestDeployConfig(t *testing.T) {
	ms := deployManifests(t)
	cm := deployFind(t, ms, "ConfigMap", "l4lb")
	text, _, _ := unstructured.NestedString(cm.Object, "data", "l4lb.yaml")
	if !strings.Contains(text, "@NODE_IP@") {
		t.Errorf("the ConfigMap's l4lb.yaml has no @NODE_IP@ for the init container to replace")
	}
	file := map[string]any{}
	js, err := utilyaml.ToJSON([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &file); err != nil {
		t.Fatal(err)
	}
	l4lb := deployContainer(t, deployFind(t, ms, "DaemonSet", "l4lb"), "l4lb")
	decap := deployContainer(t, deployFind(t, ms, "DaemonSet", "l4lb-decap"), "decap")
	if want := []string{"run", "-config", "/etc/l4lb/l4lb.yaml"}; !slices.Equal(l4lb.Args, want) {
		t.Errorf("l4lb's args %q, want %q", l4lb.Args, want)
	}
	flags := deployDecapFlags(t, decap.Args)

	var pool []string
	for _, p := range file["vip-pool"].([]any) {
		pool = append(pool, p.(string))
	}
	if got := strings.Split(flags["vip"], ","); !slices.Equal(got, pool) {
		t.Errorf("l4lb decap's -vip %q, want vip-pool's prefixes %q", flags["vip"], pool)
	}
	guePort := "6080"
	if p, ok := file["gue-port"]; ok {
		guePort = fmt.Sprint(p)
	}
	if flags["gue-port"] != guePort {
		t.Errorf("l4lb decap's -gue-port %q, the file's gue-port %s", flags["gue-port"], guePort)
	}
	adminPort := deployPort(t, file["admin"].(string))
	for _, p := range []*corev1.Probe{l4lb.StartupProbe, l4lb.ReadinessProbe, l4lb.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != adminPort || p.HTTPGet.Host != "127.0.0.1" {
			t.Errorf("l4lb's probe %+v does not ask 127.0.0.1:%s, the file's admin address", p, adminPort)
		}
	}
	if deployPort(t, flags["admin"]) == adminPort {
		t.Errorf("l4lb decap's -admin %s and l4lb's admin %s share a port on the host's network", flags["admin"], file["admin"])
	}
	mounted := func(path string) bool {
		return slices.ContainsFunc(l4lb.VolumeMounts, func(m corev1.VolumeMount) bool {
			return !m.ReadOnly && strings.HasPrefix(path, m.MountPath+"/")
		})
	}
	for _, k := range []string{"pin-dir", "state-file"} {
		if p, _ := file[k].(string); !mounted(p) {
			t.Errorf("the file's %s %q is on no writable volume of l4lb's", k, p)
		}
	}
	ns, name, _ := strings.Cut(file["k8s-lease"].(string), "/")
	if role := deployFind(t, ms, "Role", "l4lb-leader-election"); role.GetNamespace() != ns || name != deployLease {
		t.Errorf("k8s-lease %s/%s, but the lease's Role is in %s and TestDeploy checks %s", ns, name, role.GetNamespace(), deployLease)
	}
	deployCheckFile(t, strings.ReplaceAll(text, "@NODE_IP@", "198.18.0.5"))
}

// deployCheckFile runs l4lb check (the binary the package's tests share)
// on text, and wants it accepted as a file that serves a cluster's
// Services.
func deployCheckFile(t *testing.T, text string) {
	if testing.Short() || e2eRace() {
		t.Skip("-short or -race: no build of l4lb for l4lb check (the plain run has it)")
	}
	path := filepath.Join(t.TempDir(), "l4lb.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(buildL4LB(t), "check", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), ": ok: 0 services, and the Services of class maglevlb.io/l4lb from ") {
		t.Errorf("l4lb check of the ConfigMap's file: %v: %s", err, out)
	}
}

// deployFind returns the object of kind and name among ms; it fails t if none.
func deployFind(t *testing.T, ms []deployObject, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, m := range ms {
		if m.obj.GetKind() == kind && m.obj.GetName() == name {
			return m.obj
		}
	}
	t.Fatalf("deploy/ has no %s %s", kind, name)
	return nil
}

// deployContainer returns the container name of the DaemonSet ds.
func deployContainer(t *testing.T, ds *unstructured.Unstructured, name string) corev1.Container {
	t.Helper()
	var d appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ds.Object, &d); err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("DaemonSet %s has no container %s", ds.GetName(), name)
	return corev1.Container{}
}

// deployDecapFlags returns the flags of l4lb decap's args, -NAME=VALUE each,
// by name; it fails t unless the first arg is decap.
func deployDecapFlags(t *testing.T, args []string) map[string]string {
	t.Helper()
	if len(args) == 0 || args[0] != "decap" {
		t.Fatalf("l4lb-decap's args %q: not l4lb decap", args)
	}
	flags := map[string]string{}
	for _, a := range args[1:] {
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if !ok {
			t.Fatalf("l4lb-decap's arg %q: not -NAME=VALUE", a)
		}
		flags[k] = v
	}
	return flags
}

// deployPort returns the port of HOST:PORT.
func deployPort(t *testing.T, hostport string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	return port
}
