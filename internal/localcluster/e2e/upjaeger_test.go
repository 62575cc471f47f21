// This file holds the test of `kplane up --jaeger`: Jaeger runs and receives
// the API service's and the store's spans.

package e2e

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/internal/jaeger"
	"github.com/kplane/kplane/internal/testutil"
)

// TestUpJaeger runs a small `kplane up --jaeger` and checks that Jaeger
// runs and receives spans from the API service and the store (their
// OTEL_* environment comes from kplane up).
func TestUpJaeger(t *testing.T) {
	testutil.SkipShort(t, "runs a whole `kplane up` of the built binary")
	if _, err := jaeger.Binary(); err != nil {
		if testutil.InCI() {
			t.Fatalf("jaeger is required under CI: %v", err)
		}
		t.Skipf("%v", err)
	}
	dir := t.TempDir()
	cmd := exec.Command(kplaneBin, "up", "--jaeger", "--base-port=0", "--data-dir", dir,
		"--store-members=1", "--apiservers=1", "--schedulers=1", "--controller-managers=1", "--nodes=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = exec.Command(kplaneBin, "down", "--data-dir", dir).Run()
		_ = cmd.Wait()
	}()
	queryRE := regexp.MustCompile(`Jaeger query API (\S+)`)
	var queryURL string
	sc := bufio.NewScanner(stdout)
	up := false
	for sc.Scan() {
		if m := queryRE.FindStringSubmatch(sc.Text()); m != nil {
			queryURL = m[1]
		}
		if strings.Contains(sc.Text(), "kplane down") {
			up = true
			break
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	if !up || queryURL == "" {
		t.Fatalf("kplane up --jaeger did not come up (query URL %q); stderr:\n%s", queryURL, stderr.String())
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	var services []string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		resp, err := hc.Get(queryURL + "/api/services")
		if err != nil {
			continue
		}
		var body struct {
			Data []string `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err == nil && len(body.Data) >= 2 {
			services = body.Data
			break
		}
	}
	if len(services) < 2 {
		t.Fatalf("Jaeger at %s lists services %v within 60s, want spans from at least 2 components", queryURL, services)
	}
	t.Logf("services in Jaeger: %v", services)
}
