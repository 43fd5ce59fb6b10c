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
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maglevlb/maglev/k8smaglev/k8stest"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	deployNS      = "l4lb-system"
	l4lbSA        = "system:serviceaccount:l4lb-system:l4lb"
	decapSA       = "system:serviceaccount:l4lb-system:l4lb-decap"
	nobodySA      = "system:serviceaccount:l4lb-system:nobody" // bound to nothing: what every account may do
	leaseName     = "l4lb-vip-allocator"
	otherNS       = "default" // a namespace of Services, where the lease's Role does not reach
	fieldManager  = "k8stest-deploy"
	rbacPropagate = 10 * time.Second // the authorizer's caches follow new bindings within this
)

// A manifest is one object of a file under deploy/: as the file has it
// (what is created, and what must read back), and its kind.
type manifest struct {
	where string // FILE#N, for messages
	obj   *unstructured.Unstructured
}

// readManifests decodes every document of every YAML file under
// deploy/, in the files' order (kubectl apply's), each strictly by
// client-go's scheme: an unknown kind or field fails t.
func readManifests(t *testing.T) []manifest {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no manifest in %s", deployDir)
	}
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var ms []manifest
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
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
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
			ms = append(ms, manifest{where: where, obj: u})
		}
	}
	return ms
}

// TestDeploy creates every object of deploy/ and reads it back, then asks
// the authorizer what the ServiceAccounts they make may do.
func TestDeploy(t *testing.T) {
	c := k8stest.Start(t)
	cfg := c.Config(false)
	cs := c.Client(t)
	start := time.Now()
	ms := readManifests(t)
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
	t.Run("objects", func(t *testing.T) { createManifests(t, parent, cfg, cs, ms) })
	if t.Failed() {
		return
	}
	t.Run("rbac", func(t *testing.T) { checkRBAC(t, cfg, cs) })
	if !t.Failed() {
		t.Logf("%d objects created and read back, RBAC checked, in %v", len(ms), time.Since(start).Round(time.Millisecond))
	}
}

// createManifests creates each object as the manifest has it, with the
// API server's strict field validation, reads it back, and checks that
// every field the manifest sets has the manifest's value. The objects
// are deleted at the end of the parent test, but for the namespace: with no
// namespace controller in this cluster it would never finish
// terminating, so it stays for the binary's life, and a second run (or
// another test) finds it and applies the manifest's over it.
func createManifests(t, parent *testing.T, cfg *rest.Config, cs kubernetes.Interface, ms []manifest) {
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
		_, err = ri.Create(ctx, m.obj.DeepCopy(), metav1.CreateOptions{FieldValidation: "Strict", FieldManager: fieldManager})
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
			if _, err := ri.Patch(ctx, name, types.ApplyPatchType, js, metav1.PatchOptions{FieldManager: fieldManager, Force: &force, FieldValidation: "Strict"}); err != nil {
				t.Fatalf("%s: applying Namespace %s over the one there: %v", m.where, name, err)
			}
		default:
			t.Fatalf("%s: creating %s %s: %v", m.where, gvk.Kind, name, err)
		}
		got, err := ri.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: reading %s %s back: %v", m.where, gvk.Kind, name, err)
		}
		if path, ok := contains(got.Object, m.obj.Object, ""); !ok {
			t.Errorf("%s: %s %s read back differs at %s", m.where, gvk.Kind, name, path)
		}
	}
}

// contains reports whether got has every field of want with want's value
// (maps: each of want's keys; lists: the same length, each item
// containing want's), and if not, the path of the first that differs.
// What the API server adds (defaults, metadata) is not compared.
func contains(got, want any, path string) (string, bool) {
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
			if p, ok := contains(g[k], w[k], path+"."+k); !ok {
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
			if p, ok := contains(g[i], w[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
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

// An access is one request's attributes, as an authorization check asks
// them: VERB GROUP/RESOURCE[/SUBRESOURCE] in NAMESPACE ("" for every
// namespace, or a cluster-scoped resource).
type access struct {
	verb, group, resource, sub, ns, name string
}

func (a access) String() string {
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
var l4lbAllowed = []access{
	{verb: "get", resource: "services", ns: otherNS},
	{verb: "list", resource: "services"},
	{verb: "watch", resource: "services"},
	{verb: "update", resource: "services", sub: "status", ns: otherNS},
	{verb: "patch", resource: "services", sub: "status", ns: otherNS},
	{verb: "list", group: "discovery.k8s.io", resource: "endpointslices"},
	{verb: "watch", group: "discovery.k8s.io", resource: "endpointslices"},
	{verb: "list", resource: "nodes"},
	{verb: "watch", resource: "nodes"},
	{verb: "create", resource: "events", ns: otherNS},
	{verb: "patch", resource: "events", ns: otherNS},
	{verb: "create", group: "events.k8s.io", resource: "events", ns: otherNS},
	{verb: "patch", group: "events.k8s.io", resource: "events", ns: otherNS},
	{verb: "get", group: "coordination.k8s.io", resource: "leases", ns: deployNS, name: leaseName},
	{verb: "create", group: "coordination.k8s.io", resource: "leases", ns: deployNS},
	{verb: "update", group: "coordination.k8s.io", resource: "leases", ns: deployNS, name: leaseName},
}

// A sample of what neither ServiceAccount may do.
var l4lbDenied = []access{
	{verb: "get", resource: "secrets", ns: deployNS},
	{verb: "list", resource: "secrets"},
	{verb: "get", resource: "configmaps", ns: deployNS},
	{verb: "create", resource: "services", ns: otherNS},
	{verb: "update", resource: "services", ns: otherNS},
	{verb: "patch", resource: "services", ns: otherNS},
	{verb: "delete", resource: "services", ns: otherNS},
	{verb: "list", resource: "pods"},
	{verb: "get", resource: "nodes"},
	{verb: "update", resource: "nodes"},
	{verb: "patch", resource: "nodes", sub: "status"},
	{verb: "create", group: "discovery.k8s.io", resource: "endpointslices", ns: otherNS},
	{verb: "delete", resource: "events", ns: otherNS},
	{verb: "get", group: "coordination.k8s.io", resource: "leases", ns: "kube-system"},
	{verb: "update", group: "coordination.k8s.io", resource: "leases", ns: otherNS},
	{verb: "delete", group: "coordination.k8s.io", resource: "leases", ns: deployNS, name: leaseName},
	{verb: "list", group: "coordination.k8s.io", resource: "leases", ns: deployNS},
	{verb: "update", group: "rbac.authorization.k8s.io", resource: "clusterroles"},
	{verb: "create", group: "apps", resource: "daemonsets", ns: deployNS},
}

// checkRBAC asks the authorizer (SubjectAccessReview) about every right
// of l4lbAllowed and l4lbDenied, for l4lb and for l4lb-decap; then it
// lists the rules l4lb has in a namespace beyond those of a
// ServiceAccount bound to nothing (SelfSubjectRulesReview, as l4lb and
// as that account), and wants exactly the design's.
func checkRBAC(t *testing.T, cfg *rest.Config, cs kubernetes.Interface) {
	// The authorizer learns of new bindings from its caches: wait until
	// a right of each binding (the ClusterRole's, the Role's) is there
	// before believing any answer.
	cluster, lease := l4lbAllowed[0], access{verb: "get", group: "coordination.k8s.io", resource: "leases", ns: deployNS, name: leaseName}
	deadline := time.Now().Add(rbacPropagate)
	for !allowed(t, cs, l4lbSA, cluster) || !allowed(t, cs, l4lbSA, lease) {
		if time.Now().After(deadline) {
			t.Fatalf("%s may not %s, or not %s, %v after the bindings were made", l4lbSA, cluster, lease, rbacPropagate)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, a := range l4lbAllowed {
		if !allowed(t, cs, l4lbSA, a) {
			t.Errorf("%s may not %s", l4lbSA, a)
		}
		if allowed(t, cs, decapSA, a) {
			t.Errorf("%s may %s", decapSA, a)
		}
	}
	for _, a := range l4lbDenied {
		if allowed(t, cs, l4lbSA, a) {
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
			"events.k8s.io/events create", "events.k8s.io/events patch",
		},
	}
	want[otherNS] = slices.DeleteFunc(slices.Clone(want[deployNS]), func(r string) bool { return strings.HasPrefix(r, "coordination.k8s.io/") })
	for _, ns := range []string{deployNS, otherNS} {
		base := rules(t, cfg, nobodySA, ns)
		var got []string
		for r := range rules(t, cfg, l4lbSA, ns) {
			if !base[r] {
				got = append(got, r)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want[ns]) {
			t.Errorf("%s's rules in namespace %s, beyond every account's:\n\t%s\nwant\n\t%s", l4lbSA, ns, strings.Join(got, "\n\t"), strings.Join(want[ns], "\n\t"))
		}
		for r := range rules(t, cfg, decapSA, ns) {
			if !base[r] {
				t.Errorf("%s has a rule in namespace %s beyond every account's: %s", decapSA, ns, r)
			}
		}
	}
}

// saGroups are the groups the API server puts a ServiceAccount's requests
// in.
func saGroups(user string) []string {
	ns := strings.Split(user, ":")[2]
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}

// allowed asks the API server's authorizer whether user may do a.
func allowed(t *testing.T, cs kubernetes.Interface, user string, a access) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: saGroups(user),
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

// rules returns the resource rules user has in namespace ns, as
// "GROUP/RESOURCE VERB", one a verb and resource, by a
// SelfSubjectRulesReview made as user (the admin impersonates it).
func rules(t *testing.T, cfg *rest.Config, user, ns string) map[string]bool {
	t.Helper()
	imp := rest.CopyConfig(cfg)
	imp.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: saGroups(user)}
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

// stripComments returns doc without its comment lines, to tell a
// document of comments only (a file's header before its first ---) from
// an object.
func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}
