// Package repo brings a forge repository into a thread's sandbox and its work back out, with the
// forge token only ever on the bot's side (DESIGN §7): the bot clones (or fetches into its cache)
// with the token, copies the working tree with its .git into the sandbox on a branch
// threadbox/<thread>, and later takes that branch out as a git bundle through the provider's API,
// verifies it, pushes it itself and opens or updates the pull request through a Forge.
//
// It acts on sandboxes and never imports a chat package; the bot words its errors (the sentinels
// below) for the user.
package repo

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Sentinel errors, for the bot to word.
var (
	// ErrInvalidSpec: the text is not owner/name[@branch].
	ErrInvalidSpec = errors.New("not a repository: want owner/name or owner/name@branch")
	// ErrNotAllowed: the host or owner is not on repos.allow.
	ErrNotAllowed = errors.New("repository not on the allowlist")
	// ErrNotFound: the forge has no such repository or branch (or the token may not see it).
	ErrNotFound = errors.New("repository or branch not found")
	// ErrFetch: the clone or fetch failed for another reason (network, auth, server).
	ErrFetch = errors.New("could not fetch the repository")
	// ErrBranchRefused: a push to a branch outside threadbox/*.
	ErrBranchRefused = errors.New("only threadbox/* branches are pushed")
	// ErrNothingToPush: the branch has no commit that was not pushed already.
	ErrNothingToPush = errors.New("nothing new to push")
	// ErrPushRejected: the forge refused the push (protected branch, the branch moved, hooks).
	ErrPushRejected = errors.New("the forge rejected the push")
	// ErrOtherCheckout: the sandbox holds a checkout of another repository than the thread's (the
	// thread moved and its old sandbox is still there).
	ErrOtherCheckout = errors.New("the sandbox holds another repository's checkout")
	// ErrBadBundle: what came out of the sandbox is not a usable bundle of the branch.
	ErrBadBundle = errors.New("the sandbox's branch could not be taken out")
)

// BranchPrefix is the only namespace the bot pushes to.
const BranchPrefix = "threadbox/"

// Spec names a repository and, optionally, the branch to start from.
type Spec struct {
	Host, Owner, Name string
	// Branch is the base branch ("" is the repository's default).
	Branch string
}

// FullName is owner/name.
func (s Spec) FullName() string { return s.Owner + "/" + s.Name }

// String renders host/owner/name[@branch].
func (s Spec) String() string {
	out := s.Host + "/" + s.FullName()
	if s.Branch != "" {
		out += "@" + s.Branch
	}
	return out
}

var (
	namePart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
	// hostPart is DNS labels (each starting and ending with a letter or digit, so no "." or ".."
	// segment: the host names a directory of the cache) and an optional port.
	hostPart = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*(:[0-9]{1,5})?$`)
	// branchName is a conservative subset of git check-ref-format.
	branchName = regexp.MustCompile(`^[A-Za-z0-9._/-]{1,200}$`)
)

// Parse reads owner/name[@branch] or host/owner/name[@branch]; defaultHost fills a missing host.
// A pasted web address (https://host/owner/name, which chat platforms make of host/owner/name) is
// read as host/owner/name. Errors never quote the text: a pasted clone URL may carry credentials
// (https://user:token@host/…), and a message may be huge; the bot logs the error.
func Parse(text, defaultHost string) (Spec, error) {
	text = strings.TrimSpace(text)
	for _, scheme := range []string{"https://", "http://"} {
		if strings.HasPrefix(strings.ToLower(text), scheme) {
			text = strings.TrimSuffix(text[len(scheme):], "/")
			break
		}
	}
	// ".git" is trimmed from the name below, never from the whole text: in owner/name@feature.git
	// it ends the branch, and trimming it would check out a branch the user did not name.
	ref, branch, hasBranch := strings.Cut(text, "@")
	parts := strings.Split(ref, "/")
	var s Spec
	switch len(parts) {
	case 2:
		s = Spec{Host: strings.ToLower(defaultHost), Owner: parts[0], Name: parts[1]}
	case 3:
		s = Spec{Host: strings.ToLower(parts[0]), Owner: parts[1], Name: parts[2]}
	default:
		return Spec{}, fmt.Errorf("%d parts: %w", len(parts), ErrInvalidSpec)
	}
	s.Name = strings.TrimSuffix(s.Name, ".git")
	if len(s.Host) > 253 || !hostPart.MatchString(s.Host) || !namePart.MatchString(s.Owner) || !namePart.MatchString(s.Name) {
		return Spec{}, fmt.Errorf("host, owner or name: %w", ErrInvalidSpec)
	}
	if hasBranch {
		if !ValidBranch(branch) {
			return Spec{}, fmt.Errorf("branch: %w", ErrInvalidSpec)
		}
		s.Branch = branch
	}
	return s, nil
}

// ValidBranch reports whether b is a branch name the bot handles: no "..", no leading "-" or "/",
// nothing git would refuse or a shell would read.
func ValidBranch(b string) bool {
	return branchName.MatchString(b) && !strings.Contains(b, "..") && !strings.HasPrefix(b, "-") &&
		!strings.HasPrefix(b, "/") && !strings.HasSuffix(b, "/") && !strings.HasSuffix(b, ".lock") &&
		!strings.Contains(b, "//")
}

// Allowlist is repos.allow: entries "host/owner" (every repository of the owner) or
// "host/owner/name". An empty list allows nothing.
type Allowlist []string

// Check returns ErrNotAllowed unless s is on the list.
func (a Allowlist) Check(s Spec) error {
	for _, e := range a {
		e = strings.ToLower(strings.Trim(strings.TrimSpace(e), "/"))
		host, rest, _ := strings.Cut(e, "/")
		owner, name, hasName := strings.Cut(rest, "/")
		if host != strings.ToLower(s.Host) || owner != strings.ToLower(s.Owner) {
			continue
		}
		if !hasName || name == "*" || name == strings.ToLower(s.Name) {
			return nil
		}
	}
	return fmt.Errorf("%s: %w", s.Host+"/"+s.FullName(), ErrNotAllowed)
}

// ThreadBranch is the branch a thread works on: threadbox/<short thread id>, a digest of the thread
// key, so the name is short, safe in a ref and the same in every process.
func ThreadBranch(threadKey string) string {
	sum := sha256.Sum256([]byte(threadKey))
	return BranchPrefix + hex.EncodeToString(sum[:])[:10]
}
