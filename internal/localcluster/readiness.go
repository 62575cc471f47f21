// This file holds how Up waits for the control plane it started: the
// store's quorum, the API services, the nodes and the gateway, each polled
// until ready or out of time.

package localcluster

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// poll calls f until it returns nil, ctx ends or the ready timeout passes,
// checking meanwhile that no process has exited.
func (cp *ControlPlane) poll(ctx context.Context, what string, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, cp.cfg.ReadyTimeout)
	defer cancel()
	var last error
	for {
		if err := cp.Down(); err != nil {
			return err
		}
		actx, acancel := context.WithTimeout(ctx, 3*time.Second)
		last = f(actx)
		acancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last: %w)", what, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (cp *ControlPlane) waitStore(ctx context.Context) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(cp.Store.Endpoints(), ","),
		TLS: cp.Store.ClientTLS(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	return cp.poll(ctx, "store quorum", func(ctx context.Context) error {
		_, err := cli.Put(ctx, "/kplane-up/health", "ok")
		return err
	})
}

// waitAPI waits until every API service replica answers, and creates the
// namespaces the components expect.
func (cp *ControlPlane) waitAPI(ctx context.Context, addrs []string) error {
	for i, addr := range addrs {
		conn, err := cp.dial(addr)
		if err != nil {
			return err
		}
		nss := client.Must[*corev1.Namespace](conn)
		err = cp.poll(ctx, "API service at "+addr, func(ctx context.Context) error {
			if i > 0 {
				_, _, err := nss.List(ctx, "", client.ListOptions{})
				return err
			}
			return CreateSystemNamespaces(ctx, conn)
		})
		conn.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (cp *ControlPlane) waitNodes(ctx context.Context, addrs []string) error {
	conn, err := cp.dial(addrs...)
	if err != nil {
		return err
	}
	defer conn.Close()
	nodes := client.Must[*corev1.Node](conn)
	return cp.poll(ctx, strconv.Itoa(cp.cfg.Nodes)+" Ready nodes", func(ctx context.Context) error {
		l, _, err := nodes.List(ctx, "", client.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for _, n := range l {
			for _, c := range n.GetStatus().GetConditions() {
				if c.GetType() == "Ready" && c.GetStatus() == "True" {
					ready++
				}
			}
		}
		if ready < cp.cfg.Nodes {
			return fmt.Errorf("%d of %d nodes Ready", ready, cp.cfg.Nodes)
		}
		return nil
	})
}

// waitGateway waits until the gateway answers its /readyz over HTTPS to
// the admin, so that the kubeconfig written next works at once.
func (cp *ControlPlane) waitGateway(ctx context.Context) error {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cp.adminTLS.Clone()}}
	defer hc.CloseIdleConnections()
	return cp.poll(ctx, "the gateway", func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cp.GatewayURL+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("gateway /readyz: %s", resp.Status)
		}
		return nil
	})
}
