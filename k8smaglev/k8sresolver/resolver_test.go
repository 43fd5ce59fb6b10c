package k8sresolver_test

import (
	"errors"
	"testing"

	"github.com/maglevlb/maglev/k8smaglev"
	"github.com/maglevlb/maglev/k8smaglev/k8sresolver"
)

// The resolver against a real API server and real gRPC servers is tested
// in k8smaglev/k8stest (TestGRPCResolver).

func TestParseTarget(t *testing.T) {
	good := map[string]k8smaglev.Service{
		"web.default:grpc": {Namespace: "default", Name: "web", Port: "grpc"},
		"web.prod-1:9090":  {Namespace: "prod-1", Name: "web", Port: "9090"},
	}
	for s, want := range good {
		if got, err := k8sresolver.ParseTarget(s); err != nil || got != want {
			t.Errorf("ParseTarget(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	for _, s := range []string{"web:grpc", "web.default", "web.default.svc:grpc", ".default:grpc", "web.default:0", "web.Default:grpc"} {
		if _, err := k8sresolver.ParseTarget(s); !errors.Is(err, k8smaglev.ErrInvalidConfig) {
			t.Errorf("ParseTarget(%q): %v, want ErrInvalidConfig", s, err)
		}
	}
	if k8sresolver.NewBuilder(nil, k8sresolver.Options{}).Scheme() != "k8s" {
		t.Error(`scheme is not "k8s"`)
	}
}
