package sandbox

import (
	"fmt"
	"strconv"
)

// Label keys carried by every sandbox. The reaper attributes sandboxes by them, and only ever touches
// sandboxes whose deployment label is its own.
const (
	LabelDeployment = "threadbox.deployment"
	LabelThread     = "threadbox.thread"
	LabelGeneration = "threadbox.generation"
)

// Labels identify which deployment, thread and generation a sandbox belongs to.
type Labels struct {
	Deployment string
	Thread     string
	Generation int64
}

// Map renders the labels in provider-neutral form.
func (l Labels) Map() map[string]string {
	return map[string]string{
		LabelDeployment: l.Deployment,
		LabelThread:     l.Thread,
		LabelGeneration: strconv.FormatInt(l.Generation, 10),
	}
}

// ParseLabels reads our labels back from a provider's label map. Missing thread or generation labels
// are not an error: the reaper treats such a sandbox as unattributed.
func ParseLabels(m map[string]string) Labels {
	l := Labels{Deployment: m[LabelDeployment], Thread: m[LabelThread]}
	if g, err := strconv.ParseInt(m[LabelGeneration], 10, 64); err == nil {
		l.Generation = g
	}
	return l
}

// Validate checks that a sandbox can be attributed later.
func (l Labels) Validate() error {
	if l.Deployment == "" {
		return fmt.Errorf("%w: label %s is required", ErrInvalidSpec, LabelDeployment)
	}
	if l.Thread == "" {
		return fmt.Errorf("%w: label %s is required", ErrInvalidSpec, LabelThread)
	}
	return nil
}
