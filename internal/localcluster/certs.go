// This file holds WriteCerts, the credentials `kplane certs` writes for a
// deployment other than `kplane up` (the same CAs and identities, with
// server certificates for the hosts the components use), and the creation of
// the system namespaces.

package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"google.golang.org/grpc"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

// CertsConfig describes the credentials WriteCerts generates for a
// deployment other than `kplane up` (docker-compose, Kubernetes): the same
// CAs and identities, with server certificates that also name the hosts the
// components reach each other by.
type CertsConfig struct {
	// DataDir receives pki/ (ca.crt, store-ca.crt, one .crt/.key per
	// identity, nodes/)
	// and, when GatewayURL is set, kubeconfig.
	DataDir string
	// Names are DNS names or IP addresses added to every server
	// certificate besides localhost and loopback (e.g. "apiserver-1",
	// "kplane-apiserver.kplane.svc").
	Names []string
	// StoreMembers names the store members to issue certificates for:
	// <name>.crt (client URLs) and <name>-peer.crt (peer URL), as kplane up
	// issues its members'; the API services' client certificate for the
	// store is apiserver-store-client.crt.
	StoreMembers []string
	// APIServers and Nodes are how many API service serving certificates
	// (apiserver-<i>) and node client certificates (nodes/node-<i>) to
	// issue.
	APIServers, Nodes int
	// GatewayURL, when set, is the server of the admin kubeconfig written
	// to Kubeconfig (default DataDir/kubeconfig).
	GatewayURL, Kubeconfig string
	// IfMissing leaves existing DataDir/pki/ca.crt and store-ca.crt and
	// everything beside them alone (a one-shot service that runs on every
	// start). A ca.crt without store-ca.crt is refused (ErrCertsOutdated).
	IfMissing bool
}

// ErrCertsExist is returned by WriteCerts with IfMissing when the CAs are
// already there.
var ErrCertsExist = errors.New("certs: the CAs already exist")

// ErrCertsOutdated is returned by WriteCerts with IfMissing when the pki
// directory was written by an older kplane certs, whose one CA signed the
// store's certificates and everyone else's: kept, it would let any
// component's certificate reach the store.
var ErrCertsOutdated = errors.New("certs: the pki directory has ca.crt but no store-ca.crt: it was written by an older kplane, whose one CA lets every component's certificate reach the store; remove the directory (or run without --if-missing) to write new credentials")

// WriteCerts writes a CA and a certificate per component, exactly as Up
// does for its own cluster, and returns the directory holding them.
func WriteCerts(cfg CertsConfig) (string, error) {
	if cfg.DataDir == "" {
		return "", fmt.Errorf("certs: no data directory")
	}
	if cfg.APIServers <= 0 || cfg.Nodes < 0 {
		return "", fmt.Errorf("certs: need at least one API service and no negative node count")
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return "", err
	}
	// The encryption key and audit Policy for the API services go beside
	// the certificates (one Secret or volume holds them all); kept when
	// present, even with IfMissing and existing CAs.
	if err := os.MkdirAll(filepath.Join(dir, "pki"), 0o700); err != nil {
		return "", err
	}
	if _, _, err := writeSecurityDefaults(filepath.Join(dir, "pki")); err != nil {
		return "", err
	}
	if cfg.IfMissing {
		if err := checkExistingPKI(filepath.Join(dir, "pki")); err != nil {
			return filepath.Join(dir, "pki"), err
		}
	}
	id, err := writeIdentities(dir, "127.0.0.1", cfg.APIServers, cfg.Nodes, cfg.Names...)
	if err != nil {
		return "", err
	}
	for _, m := range cfg.StoreMembers {
		if _, err := memberTLSArgs(id.pki, m, cfg.StoreMembers); err != nil {
			return "", err
		}
	}
	if cfg.GatewayURL != "" {
		kc := cfg.Kubeconfig
		if kc == "" {
			kc = filepath.Join(dir, "kubeconfig")
		}
		if err := writeKubeconfig(kc, cfg.GatewayURL, id.ca.pem, id.admin); err != nil {
			return "", err
		}
	}
	return id.dir, nil
}

// checkExistingPKI returns ErrCertsExist when pkiDir holds both CAs,
// ErrCertsOutdated when it holds the cluster CA only, nil when it holds
// no CA.
func checkExistingPKI(pkiDir string) error {
	has := func(name string) (bool, error) {
		_, err := os.Stat(filepath.Join(pkiDir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}
	cluster, err := has(clusterCAFile)
	if err != nil {
		return err
	}
	store, err := has(storeCAFile)
	switch {
	case err != nil:
		return err
	case cluster && store:
		return ErrCertsExist
	case cluster:
		return fmt.Errorf("%s: %w", pkiDir, ErrCertsOutdated)
	}
	return nil
}

// SystemNamespaces are the namespaces the components expect to exist
// (Kubernetes' API server creates the same ones at start-up).
var SystemNamespaces = []string{"default", "kube-system", "kube-node-lease", "kube-public"}

// CreateSystemNamespaces creates SystemNamespaces through the API service
// on conn (as an administrator); existing ones are left alone.
func CreateSystemNamespaces(ctx context.Context, conn grpc.ClientConnInterface) error {
	nss, err := client.New[*corev1.Namespace](conn)
	if err != nil {
		return err
	}
	for _, n := range SystemNamespaces {
		if _, err := nss.Create(ctx, &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: n}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", n, err)
		}
	}
	return nil
}
