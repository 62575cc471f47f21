// This file reads the plugin's configuration from kube-apiserver's
// --admission-control-config-file: an AdmissionConfiguration whose
// PodSecurity entry holds (or points to) a PodSecurityConfiguration.

package podsecurity

import (
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
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
// exemptions). The file's other plugins are not read here.
func LoadConfig(path string) (*Configuration, error) {
	scheme := runtime.NewScheme()
	apiserverinstall.Install(scheme)
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
