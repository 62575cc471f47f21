// Package localcluster runs kplane on loopback as separate processes of the
// same binary, each with its own log file, and stops them cleanly. Start
// runs a store cluster alone (`kplane store` members, which tests drive
// directly); Up runs the whole control plane for `kplane up`: the store,
// the API services, the gateway, schedulers, controller managers and a
// node agent, with a generated CA and a certificate per component.
package localcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kplane/kplane/internal/freeport"
)

// Config describes the cluster to start.
type Config struct {
	// Binary is the kplane executable to run (default: os.Executable()).
	Binary string
	// DataDir holds one directory per member (default ./.kplane).
	DataDir string
	// Members is the number of members (default 3).
	Members int
	// Host is the loopback address to bind (default 127.0.0.1).
	Host string
	// BasePort, when non-zero, gives member i the client port BasePort+2i
	// and the peer port BasePort+2i+1; zero picks free ports.
	BasePort int
	// ExtraArgs are appended to every member's `kplane store` arguments.
	ExtraArgs []string
	// TLS runs the members with mutual TLS on their client and peer ports
	// (https URLs; certificates from a CA generated in <DataDir>/pki, see
	// Cluster.ClientTLS).
	TLS bool
	// Env is added to every member's environment.
	Env    []string
	Logger *slog.Logger

	// pki, when set by Up, is the CA to issue the members' certificates
	// from (Up's own); otherwise TLS generates one.
	pki *pki
	// ports, when set by Up, picks the free ports (Up's own, so that no
	// port goes to two processes); otherwise Start makes one.
	ports *freeport.Picker
	// metricsAddr, when set by Up, gives each member the address of its
	// Prometheus /metrics (--metrics-bind-address).
	metricsAddr func() (string, error)
}

// Member is one started member.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	DataDir   string
	LogPath   string
	// MetricsAddr is where the member serves /metrics (plain HTTP on
	// loopback), if anywhere.
	MetricsAddr string
	args        []string
	proc
}

// Cluster is a running local cluster.
type Cluster struct {
	cfg     Config
	Members []*Member
	// CAFile, ClientCertFile and ClientKeyFile are, with Config.TLS, the
	// store CA (pki/store-ca.crt) and a client certificate it signed for
	// the store (etcdctl's --cacert,
	// --cert and --key); empty otherwise.
	CAFile, ClientCertFile, ClientKeyFile string
	clientTLS                             *tls.Config
}

// Endpoints returns the members' client addresses (host:port), comma-joined
// as etcdctl's --endpoints wants them.
func (c *Cluster) Endpoints() string {
	eps := make([]string, len(c.Members))
	for i, m := range c.Members {
		eps[i] = strings.TrimPrefix(strings.TrimPrefix(m.ClientURL, "http://"), "https://")
	}
	return strings.Join(eps, ",")
}

// ClientTLS returns a TLS configuration for a store client (the CA and the
// client certificate), or nil when the cluster is plaintext.
func (c *Cluster) ClientTLS() *tls.Config {
	if c.clientTLS == nil {
		return nil
	}
	return c.clientTLS.Clone()
}

// Start starts every member. The members bootstrap a new cluster the first
// time and restart from their data directories afterwards. On error, the
// members already started are stopped.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find kplane binary: %w", err)
		}
		cfg.Binary = exe
	}
	if cfg.DataDir == "" {
		cfg.DataDir = ".kplane"
	}
	if cfg.Members <= 0 {
		cfg.Members = 3
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg}
	scheme := "http://"
	if cfg.TLS {
		scheme = "https://"
		if cfg.pki == nil {
			if cfg.pki, err = newPKI(dataDir, cfg.Host); err != nil {
				return nil, err
			}
		}
		cl, err := cfg.pki.issue(cfg.pki.storeCA, cfg.pki.dir, "store-client", "store-client", nil, false)
		if err != nil {
			return nil, err
		}
		c.CAFile, c.ClientCertFile, c.ClientKeyFile = cfg.pki.storeCA.file, cl.certFile, cl.keyFile
		if c.clientTLS, err = cl.tlsConfig(cfg.pki.storeCA); err != nil {
			return nil, err
		}
	}
	var initial, names []string
	for i := 0; i < cfg.Members; i++ {
		name := "store" + strconv.Itoa(i)
		var cport, pport int
		if cfg.BasePort != 0 {
			cport, pport = cfg.BasePort+2*i, cfg.BasePort+2*i+1
		} else {
			if cfg.ports == nil {
				cfg.ports = freeport.New(cfg.Host)
			}
			if cport, err = cfg.ports.Pick(); err != nil {
				return nil, err
			}
			if pport, err = cfg.ports.Pick(); err != nil {
				return nil, err
			}
		}
		m := &Member{
			Name:      name,
			ClientURL: scheme + net.JoinHostPort(cfg.Host, strconv.Itoa(cport)),
			PeerURL:   scheme + net.JoinHostPort(cfg.Host, strconv.Itoa(pport)),
			DataDir:   filepath.Join(dataDir, name),
		}
		m.LogPath = filepath.Join(m.DataDir, "store.log")
		c.Members = append(c.Members, m)
		initial = append(initial, name+"="+m.PeerURL)
		names = append(names, name)
	}
	for _, m := range c.Members {
		m.args = append([]string{"store",
			"--name", m.Name,
			"--data-dir", m.DataDir,
			"--listen-client-urls", m.ClientURL,
			"--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL,
			"--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
		}, cfg.ExtraArgs...)
		if cfg.TLS {
			args, err := memberTLSArgs(cfg.pki, m.Name, names)
			if err != nil {
				return nil, err
			}
			m.args = append(m.args, args...)
		}
		if cfg.metricsAddr != nil {
			if m.MetricsAddr, err = cfg.metricsAddr(); err != nil {
				return nil, err
			}
			m.args = append(m.args, "--metrics-bind-address", m.MetricsAddr)
		}
	}
	for _, m := range c.Members {
		if err := c.StartMember(m); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// StartMember (re)starts one member's process with its original arguments,
// appending to its log. Under `kplane up`'s supervisor, which restarts a
// member that fails, it is not needed (and fails while the member runs).
func (c *Cluster) StartMember(m *Member) error {
	if m.Running() {
		return fmt.Errorf("member %s is already running", m.Name)
	}
	if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
		return err
	}
	if err := m.run(c.cfg.Binary, m.args, c.cfg.Env, m.LogPath); err != nil {
		return fmt.Errorf("start member %s: %w", m.Name, err)
	}
	c.cfg.Logger.Info("member started", "name", m.Name, "pid", m.PID(), "client", m.ClientURL, "log", m.LogPath)
	return nil
}

// Stop sends SIGTERM and waits up to timeout before killing.
func (m *Member) Stop(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m.stop(ctx.Done())
}

// Stop stops every member: all are asked to stop at once, then each is
// waited for (and killed if it does not exit within 10s).
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		_ = m.signal(syscall.SIGTERM)
	}
	for _, m := range c.Members {
		m.Stop(10 * time.Second)
	}
}

// Wait blocks until ctx ends or a member exits by itself; it returns an
// error naming the member in the latter case.
func (c *Cluster) Wait(ctx context.Context) error {
	exited := make(chan *Member, len(c.Members))
	for _, m := range c.Members {
		go func() {
			select {
			case <-m.Done():
				exited <- m
			case <-ctx.Done():
			}
		}()
	}
	select {
	case <-ctx.Done():
		return nil
	case m := <-exited:
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("member %s exited unexpectedly; see %s", m.Name, m.LogPath)
	}
}
