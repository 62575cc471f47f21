// Package admissionregistration names two string types as kube-apiserver's
// internal API package does, so that a refused list printed with %#v in a
// field error reads as kube-apiserver prints it
// (`[]admissionregistration.OperationType{"CREATE", "*"}`).
package admissionregistration

// OperationType is an admission rule's operation.
type OperationType string

// ValidationAction is a binding's validation action.
type ValidationAction string

// Operations converts a rule's operations for printing.
func Operations[T ~string](in []T) []OperationType {
	out := make([]OperationType, len(in))
	for i, v := range in {
		out[i] = OperationType(v)
	}
	return out
}

// ValidationActions converts a binding's actions for printing.
func ValidationActions[T ~string](in []T) []ValidationAction {
	out := make([]ValidationAction, len(in))
	for i, v := range in {
		out[i] = ValidationAction(v)
	}
	return out
}
