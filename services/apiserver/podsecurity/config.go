// This file reads the plugin's configuration from kube-apiserver's
// --admission-control-config-file: an AdmissionConfiguration whose
// PodSecurity entry holds (or points to) a PodSecurityConfiguration.

package podsecurity

import (
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/admission"
	apiserverapi "k8s.io/apiserver/pkg/apis/apiserver"
	apiserverinstall "k8s.io/apiserver/pkg/apis/apiserver/install"
	admissionapi "k8s.io/pod-security-admission/admission/api"
	"k8s.io/pod-security-admission/admission/api/load"
	"k8s.io/pod-security-admission/admission/api/validation"
)

// PluginName is the plugin's name in an AdmissionConfiguration.
const PluginName = "PodSecurity"

// Configuration is the plugin's configuration: default levels and
// exemptions.
type Configuration = admissionapi.PodSecurityConfiguration

// LoadConfig reads the PodSecurity configuration from an admission
// configuration file, as kube-apiserver does: path "" or a file without a
// PodSecurity entry gives the defaults (privileged everywhere, no
// exemptions). PodSecurity is the only plugin kplane configures this way,
// so an entry for any other plugin is refused rather than ignored.
func LoadConfig(path string) (*Configuration, error) {
	scheme := runtime.NewScheme()
	apiserverinstall.Install(scheme)
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("podsecurity: %w", err)
		}
		obj, err := runtime.Decode(serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDecoder(), data)
		if err != nil {
			return nil, fmt.Errorf("podsecurity: %s: %w", path, err)
		}
		ac, ok := obj.(*apiserverapi.AdmissionConfiguration)
		if !ok {
			return nil, fmt.Errorf("podsecurity: %s: a %T, want an AdmissionConfiguration", path, obj)
		}
		for _, p := range ac.Plugins {
			if p.Name != PluginName {
				return nil, fmt.Errorf("podsecurity: %s: plugin %q: kplane reads only the %s plugin's configuration from this file", path, p.Name, PluginName)
			}
		}
	}
	provider, err := admission.ReadAdmissionConfiguration([]string{PluginName}, path, scheme)
	if err != nil {
		return nil, fmt.Errorf("podsecurity: %w", err)
	}
	r, err := provider.ConfigFor(PluginName)
	if err != nil {
		return nil, fmt.Errorf("podsecurity: %w", err)
	}
	return loadFrom(r)
}

func loadFrom(r io.Reader) (*Configuration, error) {
	cfg, err := load.LoadFromReader(r)
	if err != nil {
		return nil, fmt.Errorf("podsecurity: %s configuration: %w", PluginName, err)
	}
	if errs := validation.ValidatePodSecurityConfiguration(cfg); len(errs) > 0 {
		return nil, fmt.Errorf("podsecurity: %s configuration: %w", PluginName, errs.ToAggregate())
	}
	return cfg, nil
}
