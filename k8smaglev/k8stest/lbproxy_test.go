package k8stest_test

// lbproxy -k8s-service against the real API server: three lbproxy
// processes, each reading the Service's EndpointSlices through a
// kubeconfig for the user "lb" (who holds only the Role
// docs/kubernetes.md shows), route 1,000 keys alike, and follow a new
// ready endpoint.

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maglevlb/maglev/k8smaglev/k8stest"
)

// buildLBProxy builds cmd/lbproxy, in its own module (go build -C),
// and returns the binary's path.
func buildLBProxy(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lbproxy")
	gocmd := "go" // go test puts its own GOROOT/bin first in PATH
	if out, err := exec.Command(gocmd, "build", "-C", "../../cmd/lbproxy", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build lbproxy: %v: %s", err, out)
	}
	return bin
}

// startLBProxy starts lbproxy on addr with -k8s-service, and waits until
// it serves.
func startLBProxy(t *testing.T, bin, addr, svc, kubeconfig string) {
	t.Helper()
	cmd := exec.Command(bin, "-listen", addr, "-admin", "", "-key", "header:X-Key",
		"-k8s-service", svc, "-kubeconfig", kubeconfig, "-health-path", "")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // it may have exited
		cmd.Wait()         //nolint:errcheck // killed
		if t.Failed() {
			t.Logf("lbproxy %s:\n%s", addr, out.String())
		}
	})
	waitFor(t, 20*time.Second, "lbproxy serving on "+addr, func() bool {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return true
	})
}

// viaProxy sends GET / with key through the lbproxy at addr and returns
// the backend that answered.
func viaProxy(c *http.Client, addr, key string) (string, error) {
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Header.Set("X-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d, %v: %s", resp.StatusCode, err, b)
	}
	return string(b), nil
}

func TestLBProxy(t *testing.T) {
	c := k8stest.Start(t)
	bin := buildLBProxy(t)
	bs := startBackends(t, 7, 6)
	ns := c.Namespace(t)
	c.GrantEndpointSlices(t, ns)
	cs := c.Client(t)
	createService(t, cs, ns, "web")
	putSlice(t, cs, ns, "web", "web-a", 0, readyEPs(bs[:5]...)...)
	kc := c.Kubeconfig(t)
	var addrs []string
	for i := range 3 {
		a := fmt.Sprintf("%s:%d", k8stest.APIServerIP, 18080+i)
		startLBProxy(t, bin, a, ns+"/web:http", kc)
		addrs = append(addrs, a)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	ks := keys(1000)
	check := func(want map[string]string) {
		t.Helper()
		var mu sync.Mutex
		bad := 0
		var wg sync.WaitGroup
		for _, a := range addrs {
			wg.Go(func() {
				for _, k := range ks {
					if got, err := viaProxy(client, a, k); err != nil || got != want[k] {
						mu.Lock()
						if bad < 3 {
							t.Errorf("lbproxy %s, key %s: %q %v, want %s", a, k, got, err, want[k])
						}
						bad++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if bad > 0 {
			t.Fatalf("%d of %d requests missed their owner", bad, len(ks)*len(addrs))
		}
	}
	check(owners(t, addrsOf(bs[:5]...), ks))

	want := owners(t, addrsOf(bs...), ks)
	var probe string
	for _, k := range ks {
		if want[k] == bs[5].addr {
			probe = k
			break
		}
	}
	putSlice(t, cs, ns, "web", "web-a", 0, readyEPs(bs...)...)
	d := waitFor(t, 10*time.Second, "the new endpoint through every lbproxy", func() bool {
		for _, a := range addrs {
			if got, err := viaProxy(client, a, probe); err != nil || got != bs[5].addr {
				return false
			}
		}
		return true
	})
	t.Logf("a new ready endpoint: Update returned → routed by all 3 lbproxy processes in %v", d)
	check(want)
}
