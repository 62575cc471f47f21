// This file reads the exporter's Config from the OTEL_EXPORTER_OTLP_*
// environment the way the SDK's otlptracegrpc exporter does (its
// internal/otlpconfig and internal/envconfig, which are not importable):
// each OTEL_EXPORTER_OTLP_TRACES_X wins over OTEL_EXPORTER_OTLP_X. Two
// deliberate differences: a malformed value (timeout, certificate file,
// header) is an error here, where the SDK logs it and carries on without
// it; and a bare host:port endpoint is used as given, where the SDK's URL
// parsing rejects an IP address with a port and falls back to
// localhost:4317.

package otlpexport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

const envPrefix = "OTEL_EXPORTER_OTLP_"

// ConfigFromEnv reads the OTLP/gRPC trace exporter's environment through
// getenv (os.Getenv) and the certificate files through readFile
// (os.ReadFile). It does not read OTEL_EXPORTER_OTLP_PROTOCOL: choosing
// gRPC is the caller's business.
func ConfigFromEnv(getenv func(string) string, readFile func(string) ([]byte, error)) (Config, error) {
	// get returns the first of the TRACES_-specific and the generic
	// variable that is set (and not blank).
	get := func(name string) (string, bool) {
		for _, k := range []string{envPrefix + "TRACES_" + name, envPrefix + name} {
			if v := strings.TrimSpace(getenv(k)); v != "" {
				return v, true
			}
		}
		return "", false
	}
	var cfg Config
	if v, ok := get("ENDPOINT"); ok {
		target, insecure, err := parseEndpoint(v)
		if err != nil {
			return Config{}, err
		}
		cfg.Endpoint, cfg.Insecure = target, insecure
	} else {
		cfg.Endpoint = "localhost:4317"
	}
	if v, ok := get("INSECURE"); ok {
		cfg.Insecure = strings.EqualFold(v, "true")
	}
	var tc tls.Config
	if v, ok := get("CERTIFICATE"); ok {
		pem, err := readFile(v)
		if err != nil {
			return Config{}, fmt.Errorf("otlpexport: CA certificate: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return Config{}, fmt.Errorf("otlpexport: CA certificate %s: no PEM certificate in it", v)
		}
	}
	// A client certificate and its key come from the same namespace, as in
	// the SDK: TRACES_ only if both TRACES_ variables are set.
	for _, ns := range []string{"TRACES_", ""} {
		cert := strings.TrimSpace(getenv(envPrefix + ns + "CLIENT_CERTIFICATE"))
		key := strings.TrimSpace(getenv(envPrefix + ns + "CLIENT_KEY"))
		if cert == "" || key == "" {
			continue
		}
		cb, err := readFile(cert)
		if err != nil {
			return Config{}, fmt.Errorf("otlpexport: client certificate: %w", err)
		}
		kb, err := readFile(key)
		if err != nil {
			return Config{}, fmt.Errorf("otlpexport: client key: %w", err)
		}
		pair, err := tls.X509KeyPair(cb, kb)
		if err != nil {
			return Config{}, fmt.Errorf("otlpexport: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
		break
	}
	if tc.RootCAs != nil || len(tc.Certificates) > 0 {
		cfg.TLS = &tc
	}
	if v, ok := get("HEADERS"); ok {
		h, err := parseHeaders(v)
		if err != nil {
			return Config{}, err
		}
		cfg.Headers = h
	}
	if v, ok := get("COMPRESSION"); ok {
		cfg.Gzip = v == "gzip"
	}
	cfg.Timeout = defaultTimeout
	if v, ok := get("TIMEOUT"); ok {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			return Config{}, fmt.Errorf("otlpexport: timeout %q: want milliseconds", v)
		}
		cfg.Timeout = time.Duration(ms) * time.Millisecond
	}
	return cfg, nil
}

// parseEndpoint turns an endpoint into a gRPC target: an http or https URL
// is its host:port (the path means nothing to gRPC), plain text for http;
// anything else with a scheme (unix:///path, dns:///host:port) is a gRPC
// target as it stands, secure unless unix or told otherwise; a bare
// host:port is secure unless told otherwise, as in the SDK.
func parseEndpoint(v string) (target string, insecure bool, err error) {
	if !strings.Contains(v, "://") {
		return v, false, nil
	}
	u, err := url.Parse(v)
	if err != nil {
		return "", false, fmt.Errorf("otlpexport: endpoint: %w", err)
	}
	switch s := strings.ToLower(u.Scheme); s {
	case "http", "https":
		if u.Host == "" {
			return "", false, fmt.Errorf("otlpexport: endpoint %q has no host", v)
		}
		return u.Host, s == "http", nil
	case "unix":
		return v, true, nil
	}
	return v, false, nil
}

// parseHeaders reads OTLP's header list, "k1=v1,k2=v2", values
// percent-encoded.
func parseHeaders(v string) (map[string]string, error) {
	h := make(map[string]string)
	for _, pair := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t\"(),/:;<>?@[\\]{}") {
			return nil, fmt.Errorf("otlpexport: header %q: want key=value", pair)
		}
		val, err := url.PathUnescape(val)
		if err != nil {
			return nil, fmt.Errorf("otlpexport: header %q: %w", k, err)
		}
		h[k] = strings.TrimSpace(val)
	}
	if len(h) == 0 {
		return nil, errors.New("otlpexport: empty header list")
	}
	return h, nil
}
