// This file holds the audit Policy: Kubernetes' audit.k8s.io/v1 Policy
// file, read and evaluated by k8s.io/apiserver's own loader and rule
// evaluator, which decides per request the level (None, Metadata, Request,
// RequestResponse), the stages left out and whether managedFields are
// dropped from the recorded bodies.

package audit

import (
	"fmt"
	"slices"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	k8saudit "k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/kplane/kplane/services/apiserver/request"
)

// The levels and stages of Kubernetes' audit events.
const (
	LevelNone            = string(auditinternal.LevelNone)
	LevelMetadata        = string(auditinternal.LevelMetadata)
	LevelRequest         = string(auditinternal.LevelRequest)
	LevelRequestResponse = string(auditinternal.LevelRequestResponse)

	StageRequestReceived  = string(auditinternal.StageRequestReceived)
	StageResponseStarted  = string(auditinternal.StageResponseStarted)
	StageResponseComplete = string(auditinternal.StageResponseComplete)
	StagePanic            = string(auditinternal.StagePanic)
)

// Policy is a loaded audit Policy. A nil *Policy records every request at
// level Metadata at its ResponseComplete stage only (kplane's behaviour
// with --audit-log-path and no --audit-policy-file).
type Policy struct {
	eval k8saudit.PolicyRuleEvaluator
}

// LoadPolicy reads an audit Policy file (audit.k8s.io/v1; the rules are
// validated as kube-apiserver validates them).
func LoadPolicy(path string) (*Policy, error) {
	p, err := policy.LoadPolicyFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit policy: %w", err)
	}
	return &Policy{eval: policy.NewPolicyRuleEvaluator(p)}, nil
}

// ParsePolicy reads an audit Policy from its YAML or JSON text.
func ParsePolicy(b []byte) (*Policy, error) {
	p, err := policy.LoadPolicyFromBytes(b)
	if err != nil {
		return nil, fmt.Errorf("audit policy: %w", err)
	}
	return &Policy{eval: policy.NewPolicyRuleEvaluator(p)}, nil
}

// Decision is what the policy says about one request.
type Decision struct {
	Level             string
	OmitStages        []string
	OmitManagedFields bool
}

// Records reports whether the request is audited at all.
func (d Decision) Records() bool { return d.Level != "" && d.Level != LevelNone }

// Omits reports whether stage is left out.
func (d Decision) Omits(stage string) bool { return slices.Contains(d.OmitStages, stage) }

// Decide evaluates the policy's rules, first match wins, for a request
// with attributes a (by the user it acts as).
func (p *Policy) Decide(a request.Attributes) Decision {
	if p == nil {
		return Decision{Level: LevelMetadata, OmitStages: []string{StageRequestReceived}}
	}
	rec := authorizer.AttributesRecord{
		User:      &user.DefaultInfo{Name: a.User.Name, UID: a.User.UID, Groups: a.User.Groups},
		Verb:      a.Verb,
		Namespace: a.Namespace, APIGroup: a.APIGroup, APIVersion: a.APIVersion,
		Resource: a.Resource, Subresource: a.Subresource, Name: a.Name,
		ResourceRequest: a.Resource != "",
		Path:            a.Path,
	}
	cfg := p.eval.EvaluatePolicyRule(rec)
	d := Decision{Level: string(cfg.Level), OmitManagedFields: cfg.OmitManagedFields}
	for _, s := range cfg.OmitStages {
		d.OmitStages = append(d.OmitStages, string(s))
	}
	return d
}
