package sandbox

// Wrapper is a provider that adds to another one (the model gateway's sockets, restricted egress).
// Unwrap returns the provider it wraps.
type Wrapper interface {
	Unwrap() Provider
}

// As finds the first provider in p's chain of wrappers, p itself first, that has capability T
// (Pinger, Attacher, VolumeReaper, …), the way errors.As walks wrapped errors. A wrapper need not
// pass every optional interface through for callers that use As.
func As[T any](p Provider) (T, bool) {
	for p != nil {
		if t, ok := p.(T); ok {
			return t, true
		}
		w, ok := p.(Wrapper)
		if !ok {
			break
		}
		p = w.Unwrap()
	}
	var zero T
	return zero, false
}
