// This file holds the tests of Options: the flags filling them (as `kplane
// apiserver` parses its command line), their validation, and the chain
// Wire builds from them, plugins left out by name included.

package apiserver_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/kplane/kplane/services/apiserver"
)

func TestOptionsFlags(t *testing.T) {
	o := apiserver.DefaultOptions()
	f := pflag.NewFlagSet("apiserver", pflag.ContinueOnError)
	o.AddFlags(f)
	if got := f.Lookup("store-endpoints").DefValue; got != "http://127.0.0.1:2379" {
		t.Errorf("--store-endpoints defaults to %q, want http://127.0.0.1:2379", got)
	}
	err := f.Parse([]string{
		"--store-endpoints= https://s1:2379 ,,https://s2:2379",
		"--service-account-issuer=https://a", "--service-account-issuer=https://b",
		"--api-audiences=x,y",
		"--audit-log-maxsize=7",
		"--oidc-required-claim=team=core",
		"--default-not-ready-toleration-seconds=60",
		"--enable-priority-and-fairness=false",
		"--request-timeout=30s",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{name: "store endpoints", got: o.StoreEndpoints, want: []string{"https://s1:2379", "https://s2:2379"}},
		{name: "issuers", got: o.ServiceAccounts.Issuers, want: []string{"https://a", "https://b"}},
		{name: "audiences", got: o.ServiceAccounts.Audiences(), want: []string{"x", "y"}},
		{name: "audit max size", got: o.Audit.MaxSizeMB, want: 7},
		{name: "audit backups (default)", got: o.Audit.MaxBackups, want: 10},
		{name: "required claims", got: o.OIDCRequiredClaims, want: []string{"team=core"}},
		{name: "not-ready seconds", got: o.NotReadyTolerationSeconds, want: int64(60)},
		{name: "unreachable seconds (default)", got: o.UnreachableTolerationSeconds, want: int64(300)},
		{name: "priority and fairness", got: o.EnablePriorityAndFairness, want: false},
		{name: "request timeout", got: o.RequestTimeout, want: 30 * time.Second},
		{name: "watch window (default)", got: o.WatchWindow, want: 10000},
		{name: "oidc username claim (default)", got: o.OIDC.Flags.UsernameClaim, want: "sub"},
	} {
		if diff := cmp.Diff(c.want, c.got); diff != "" {
			t.Errorf("%s: (-want +got)\n%s", c.name, diff)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*apiserver.Options)
		want   string
	}{
		{name: "negative compaction", change: func(o *apiserver.Options) { o.CompactionInterval = -time.Minute }, want: "--etcd-compaction-interval -1m0s: must not be negative"},
		{name: "negative inflight", change: func(o *apiserver.Options) { o.MaxMutatingRequestsInflight = -1 }, want: "must not be negative (0: no limit)"},
		{name: "no request timeout", change: func(o *apiserver.Options) { o.RequestTimeout = 0 }, want: "--request-timeout 0s: must be positive"},
		{name: "negative event TTL", change: func(o *apiserver.Options) { o.EventTTL = -time.Second }, want: "--event-ttl -1s: must not be negative"},
		{name: "port out of range", change: func(o *apiserver.Options) { o.SecurePort = 70000 }, want: "--secure-port 70000: must be a port number"},
		{name: "unknown plugin", change: func(o *apiserver.Options) { o.DisabledAdmission = []string{"AlwaysPullImages"} }, want: `admission plugin "AlwaysPullImages"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := apiserver.DefaultOptions()
			tt.change(&o)
			if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	o := apiserver.DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

// TestWireChain: the admission chain of the standard service, in
// kube-apiserver's order, and what DisabledAdmission leaves out.
func TestWireChain(t *testing.T) {
	names := func(plugins any) []string {
		var out []string
		switch ps := plugins.(type) {
		case []apiserver.MutatingAdmission:
			for _, p := range ps {
				out = append(out, fmt.Sprintf("%T", p))
			}
		case []apiserver.ValidatingAdmission:
			for _, p := range ps {
				out = append(out, fmt.Sprintf("%T", p))
			}
		}
		return out
	}
	tests := []struct {
		name                     string
		disabled                 []string
		wantMutating, wantValids []string
		wantServiceAccountsSinks int
	}{
		{
			name:                     "all",
			wantMutating:             []string{"*serviceaccountadmission.Plugin", "*defaulttolerationseconds.Plugin", "*webhook.Webhooks"},
			wantValids:               []string{"*authz.NodeRestriction", "*webhook.Webhooks"},
			wantServiceAccountsSinks: 1,
		},
		{
			name:         "no ServiceAccount, no webhooks",
			disabled:     []string{"ServiceAccount", "MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"},
			wantMutating: []string{"*defaulttolerationseconds.Plugin"},
			wantValids:   []string{"*authz.NodeRestriction"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := apiserver.DefaultOptions()
			o.InsecurePlaintext, o.DisabledAdmission = true, tt.disabled
			w, err := apiserver.Wire(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if diff := cmp.Diff(tt.wantMutating, names(w.Config.Mutating)); diff != "" {
				t.Errorf("mutating (-want +got)\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantValids, names(w.Config.Validating)); diff != "" {
				t.Errorf("validating (-want +got)\n%s", diff)
			}
			if got := len(w.Config.Informers["serviceaccounts"]); got != tt.wantServiceAccountsSinks {
				t.Errorf("serviceaccounts informer sinks: got %d, want %d", got, tt.wantServiceAccountsSinks)
			}
			if w.Config.Authenticator == nil || w.Config.Authorizer == nil || len(w.Config.Bootstrap) == 0 {
				t.Error("no authenticator, authorizer or bootstrap objects")
			}
			if !slices.ContainsFunc(w.Config.Informers["clusterroles"], func(s apiserver.ObjectSink) bool { return s == apiserver.ObjectSink(w.RBAC) }) {
				t.Error("RBAC is not fed clusterroles")
			}
		})
	}
}

func TestWireNeedsTLSOrPlaintext(t *testing.T) {
	_, err := apiserver.Wire(context.Background(), apiserver.DefaultOptions())
	if err == nil || !strings.Contains(err.Error(), "--tls-cert-file and --tls-private-key-file are required") {
		t.Errorf("got %v, want the TLS flags asked for", err)
	}
}
