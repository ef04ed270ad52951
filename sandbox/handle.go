package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrBadHandle: a stored handle cannot be used by this process: it does not decode, or it names
// another provider (the deployment switched providers since it was saved).
var ErrBadHandle = errors.New("unusable sandbox handle")

// EncodeHandle is the one way a Handle is saved (the session row's handle column). A zero handle
// encodes as nil: no sandbox.
func EncodeHandle(h Handle) (json.RawMessage, error) {
	if h.IsZero() {
		return nil, nil
	}
	raw, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode sandbox handle: %w", err)
	}
	return raw, nil
}

// DecodeHandle is the one way a saved handle is read back, for provider (the configured provider's
// Name). Nothing saved, JSON null, or a handle with an empty id decode as the zero Handle with no
// error: the session has no sandbox. A handle that does not decode, or that belongs to another
// provider, is ErrBadHandle; the decoded handle is returned with it where there is one, for logs.
func DecodeHandle(raw json.RawMessage, provider string) (Handle, error) {
	var h Handle
	if len(bytes.TrimSpace(raw)) == 0 {
		return h, nil
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return Handle{}, fmt.Errorf("%w: %w", ErrBadHandle, err)
	}
	if h.IsZero() {
		return Handle{}, nil
	}
	if h.Provider != provider {
		return h, fmt.Errorf("%w: it belongs to provider %q, this process runs %q", ErrBadHandle, h.Provider, provider)
	}
	return h, nil
}

// DecodeHandleAmong is DecodeHandle for a process that runs several providers: the handle may belong
// to any of the named ones (the deployment's enabled providers). One naming a provider not among
// them is ErrBadHandle, with the decoded handle, as in DecodeHandle.
func DecodeHandleAmong(raw json.RawMessage, providers []string) (Handle, error) {
	var h Handle
	if len(bytes.TrimSpace(raw)) == 0 {
		return h, nil
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return Handle{}, fmt.Errorf("%w: %w", ErrBadHandle, err)
	}
	if h.IsZero() {
		return Handle{}, nil
	}
	for _, p := range providers {
		if h.Provider == p {
			return h, nil
		}
	}
	return h, fmt.Errorf("%w: it belongs to provider %q, which this process does not run (it runs %s)",
		ErrBadHandle, h.Provider, strings.Join(providers, ", "))
}

// NewHandle is a provider's Handle of sandbox id, with its private state (a plain struct, which
// cannot fail to encode) saved as JSON under the state's version.
func NewHandle(provider, id string, version int, state any) Handle {
	raw, _ := json.Marshal(state)
	return Handle{Provider: provider, ID: id, Version: version, State: raw}
}

// DecodeState checks that h is a handle of provider (or names none, as a hand-built one may), with an
// id and a state version no newer than version, and decodes its private state into state (left as
// it is when the handle has none). Another provider's handle or a newer or broken state is
// ErrInvalidSpec; an empty id is ErrNotFound.
func (h Handle) DecodeState(provider string, version int, state any) error {
	if h.Provider != "" && h.Provider != provider {
		return fmt.Errorf("handle of provider %q given to %q: %w", h.Provider, provider, ErrInvalidSpec)
	}
	if h.ID == "" {
		return fmt.Errorf("empty sandbox handle: %w", ErrNotFound)
	}
	if h.Version > version {
		return fmt.Errorf("handle version %d is newer than this build understands (%d): %w", h.Version, version, ErrInvalidSpec)
	}
	if len(h.State) > 0 {
		if err := json.Unmarshal(h.State, state); err != nil {
			return fmt.Errorf("handle state: %w: %w", ErrInvalidSpec, err)
		}
	}
	return nil
}
