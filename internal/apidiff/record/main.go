// Command record runs an apidiff corpus against kube-apiserver and writes
// its answers: by default gateway/testdata/admission (LimitRange,
// ResourceQuota, Priority, Pod Security) into its recorded.json, which
// gateway's TestAdmissionLikeKubernetes compares kplane's answers with;
// -corpus and -out name another (the custom resources of
// services/controllers/kubectltest/testdata/crcases). scripts/record-tables.sh
// runs it (RECORDER=./internal/apidiff/record) against a fresh
// kube-apiserver.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kplane/kplane/internal/apidiff"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the kube-apiserver to record")
	corpus := flag.String("corpus", "gateway/testdata/admission/corpus.yaml", "the corpus")
	out := flag.String("out", "gateway/testdata/admission/recorded.json", "where the answers go")
	flag.Parse()
	if err := run(context.Background(), *kubeconfig, *corpus, *out); err != nil {
		slog.Error("record", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, corpus, out string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	cases, err := apidiff.Load(corpus)
	if err != nil {
		return err
	}
	send := apidiff.HTTPSender(ctx, hc, cfg.Host, "")
	outcomes, err := apidiff.Run(cases, send)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(outcomes, "", "  ")
	if err != nil {
		return err
	}
	slog.Info("recorded", "cases", len(outcomes))
	return os.WriteFile(out, append(b, '\n'), 0o644)
}
