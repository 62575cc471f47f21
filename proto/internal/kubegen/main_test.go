// This file tests the naming rules that keep the Go API protoc-gen-go
// generates close to Kubernetes' Go field names.

package main

import "testing"

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"HostIP": "host_ip", "HostIPs": "host_ips", "PodIPs": "pod_ips", "DNSConfig": "dns_config",
		"TTLSecondsAfterFinished": "ttl_seconds_after_finished", "UID": "uid", "APIVersion": "api_version",
		"HTTPGet": "http_get", "FieldsV1": "fields_v1", "ClusterIPs": "cluster_ips", "SELinuxOptions": "se_linux_options",
		"TargetWWNs": "target_wwns", "Name": "name",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGoCamelAndJSON(t *testing.T) {
	for in, want := range map[string]string{"host_ip": "HostIp", "fields_v1": "FieldsV1", "http_get": "HttpGet", "se_linux_options": "SeLinuxOptions"} {
		if got := goCamel(in); got != want {
			t.Errorf("goCamel(%q) = %q, want %q", in, got, want)
		}
	}
	if got := defaultJSON("host_ip"); got != "hostIp" {
		t.Errorf("defaultJSON(host_ip) = %q", got)
	}
}
