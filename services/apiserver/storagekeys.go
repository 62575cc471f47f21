// This file holds where each built-in resource's objects are kept in the
// store: kube-apiserver v1.33's resource-to-key layout, so that it and
// kplane find each other's objects.

package apiserver

// kubeKeyPath is the part of a built-in resource's keys that names the
// resource: <prefix><path>/<namespace>/<name> (cluster-scoped:
// <prefix><path>/<name>). It is kube-apiserver's layout, checked against
// v1.33.13:
//
//   - the plural for most resources (pkg/kubeapiserver's storage factory
//     lowercases the resource);
//   - SpecialDefaultResourcePrefixes (pkg/kubeapiserver/
//     default_storage_factory_builder.go) for the resources named before
//     they were renamed: replicationcontrollers → controllers, endpoints →
//     services/endpoints, nodes → minions, services → services/specs,
//     ingresses → ingress;
//   - <group>/<plural> for the resources of the servers kube-apiserver
//     chains in front of its own, which key by group and resource
//     (k8s.io/apiserver's SimpleStorageFactory):
//     customresourcedefinitions → apiextensions.k8s.io/customresourcedefinitions
//     (and apiservices → apiregistration.k8s.io/apiservices, not served
//     here);
//   - events.k8s.io Events are core Events (cohabiting resources): views
//     take their stored resource's path (resourceInfo.storagePath).
//
// Custom resources' keys are <group>/<plural> (resourceInfo.storagePath),
// as kube-apiserver's apiextensions server keys them.
func kubeKeyPath(group, resource string) string {
	if group == "" {
		switch resource {
		case "replicationcontrollers":
			return "controllers"
		case "endpoints":
			return "services/endpoints"
		case "nodes":
			return "minions"
		case "services":
			return "services/specs"
		}
		return resource
	}
	switch {
	case resource == "ingresses" && (group == "networking.k8s.io" || group == "extensions"):
		return "ingress"
	case resource == "customresourcedefinitions" && group == "apiextensions.k8s.io",
		resource == "apiservices" && group == "apiregistration.k8s.io":
		return group + "/" + resource
	}
	return resource
}
