package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/threadbox/threadbox/sandbox"
)

// prepareWorkDir resolves the sandbox user to numbers and makes the work directory theirs, before
// the container starts. Both answers depend only on the image's content, so they are cached by
// image ID: each archive call costs tens of milliseconds (the daemon mounts the container for it),
// which would otherwise be most of the provider's overhead on a create.
func (p *Provider) prepareWorkDir(ctx context.Context, id string, spec sandbox.Spec, st handleState) (uid, gid int, err error) {
	c, err := p.cli.ContainerInspect(ctx, id)
	if err != nil {
		return 0, 0, wrapErr("inspect "+id, err)
	}
	image := c.Image // the ID the container was created from, even if the tag moves meanwhile
	uid, gid, ok := p.facts.owner(image, spec.User)
	if !ok {
		if uid, gid, err = p.resolveOwner(ctx, id, spec.User); err != nil {
			return 0, 0, err
		}
		p.facts.setOwner(image, spec.User, uid, gid)
	}
	if uid == 0 && !spec.AllowRoot {
		return 0, 0, fmt.Errorf("docker create: %w: user %q is uid 0 in image %s", sandbox.ErrInvalidSpec, spec.User, spec.Image)
	}
	st.UID, st.GID = uid, gid
	key := fmt.Sprintf("%s\x00%s\x00%d:%d", image, spec.WorkDir, uid, gid)
	owned, known := p.facts.workDirOwned(key)
	if known && owned {
		return uid, gid, nil
	}
	if !known {
		if owned, err = p.workDirOwned(ctx, id, spec.WorkDir, st); err != nil {
			return 0, 0, err
		}
		p.facts.setWorkDirOwned(key, owned)
		if owned {
			return uid, gid, nil
		}
	}
	return uid, gid, p.chownWorkDir(ctx, id, spec, st)
}

// workDirOwned reports whether the fresh volume already belongs to the user. A fresh volume copies
// the image's directory, owner included, when the image has one; otherwise its root is root's.
func (p *Provider) workDirOwned(ctx context.Context, id, workDir string, st handleState) (bool, error) {
	rc, _, err := p.cli.CopyFromContainer(ctx, id, workDir)
	if err != nil {
		return false, wrapErr("stat workdir", err)
	}
	hdr, err := tar.NewReader(rc).Next()
	_ = rc.Close()
	if err != nil {
		return false, fmt.Errorf("docker stat workdir %s: %w", workDir, err)
	}
	return hdr.Uid == st.UID && hdr.Gid == st.GID, nil
}

// chownWorkDir hands the work directory to the user. With every capability dropped nothing inside
// the container can chown it, but the daemon can: extracting a tar entry for a directory applies the
// entry's owner. The daemon refuses to extract onto a read-only root, so in that case the entry goes
// through a throwaway, never-started container sharing the volume.
func (p *Provider) chownWorkDir(ctx context.Context, id string, spec sandbox.Spec, st handleState) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeDir, Name: path.Base(spec.WorkDir) + "/", Mode: 0o755,
		Uid: st.UID, Gid: st.GID, ModTime: time.Now(),
	}); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	target := id
	if spec.ReadOnlyRoot {
		helper, err := p.cli.ContainerCreate(ctx,
			&container.Config{Image: spec.Image, Labels: spec.Labels.Map(), Cmd: []string{"true"}},
			&container.HostConfig{
				NetworkMode: "none",
				Mounts:      []mount.Mount{{Type: mount.TypeVolume, Source: st.Volume, Target: spec.WorkDir}},
			}, nil, nil, "")
		if err != nil {
			return wrapErr("create chown helper", err)
		}
		defer p.bestEffort(ctx, "remove chown helper", func(ctx context.Context) error {
			return p.cli.ContainerRemove(ctx, helper.ID, container.RemoveOptions{Force: true})
		})
		target = helper.ID
	}
	if err := p.cli.CopyToContainer(ctx, target, path.Dir(spec.WorkDir), &buf, container.CopyToContainerOptions{}); err != nil {
		return wrapErr("chown workdir", err)
	}
	return nil
}

// resolveOwner turns a user ("uid:gid", "uid", "name", "name:group") into numbers the way the
// runtime will: names through the image's /etc/passwd and /etc/group, and a uid without a group
// gets its passwd entry's group, or 0 when there is none (Docker's rule). Files the provider writes
// carry these numbers.
func (p *Provider) resolveOwner(ctx context.Context, id, user string) (uid, gid int, err error) {
	name, group, hasGroup := strings.Cut(user, ":")
	uid, uidNum := atoi(name)
	gid, gidNum := atoi(group)
	if uidNum && hasGroup && gidNum {
		return uid, gid, nil
	}
	passwd, err := p.readEtc(ctx, id, "/etc/passwd")
	if err != nil {
		return 0, 0, err
	}
	found := false
	for _, f := range etcEntries(passwd, 4) {
		if f[0] != name && !(uidNum && f[2] == name) {
			continue
		}
		u, ok1 := atoi(f[2])
		g, ok2 := atoi(f[3])
		if ok1 && ok2 {
			uid, found = u, true
			if !hasGroup {
				gid = g
			}
			break
		}
	}
	switch {
	case !found && !uidNum:
		return 0, 0, fmt.Errorf("docker create: %w: user %q is not in the image's /etc/passwd", sandbox.ErrInvalidSpec, name)
	case !found && !hasGroup:
		gid = 0
	}
	if hasGroup && !gidNum {
		groups, err := p.readEtc(ctx, id, "/etc/group")
		if err != nil {
			return 0, 0, err
		}
		gfound := false
		for _, f := range etcEntries(groups, 3) {
			if g, ok := atoi(f[2]); ok && f[0] == group {
				gid, gfound = g, true
				break
			}
		}
		if !gfound {
			return 0, 0, fmt.Errorf("docker create: %w: group %q is not in the image's /etc/group", sandbox.ErrInvalidSpec, group)
		}
	}
	return uid, gid, nil
}

// readEtc reads a small system file through the archive API; a missing file reads as empty.
func (p *Provider) readEtc(ctx context.Context, id, file string) ([]byte, error) {
	b, err := p.readFile(ctx, id, file, 1<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// etcEntries splits colon-separated lines, keeping those with at least n fields.
func etcEntries(b []byte, n int) [][]string {
	var out [][]string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(strings.TrimSpace(line), ":"); len(f) >= n && !strings.HasPrefix(f[0], "#") {
			out = append(out, f)
		}
	}
	return out
}

func atoi(s string) (int, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// imageFacts caches what an image's content says about users and work directories. Image IDs are
// content hashes, so an entry never goes stale; the maps are only bounded against unusual churn.
type imageFacts struct {
	mu       sync.Mutex // protects the following
	owners   map[string][2]int
	workDirs map[string]bool
}

func (f *imageFacts) owner(image, user string) (uid, gid int, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.owners[image+"\x00"+user]
	return v[0], v[1], ok
}

func (f *imageFacts) setOwner(image, user string, uid, gid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.owners == nil || len(f.owners) >= 1024 {
		f.owners = map[string][2]int{}
	}
	f.owners[image+"\x00"+user] = [2]int{uid, gid}
}

func (f *imageFacts) workDirOwned(key string) (owned, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	owned, known = f.workDirs[key]
	return owned, known
}

func (f *imageFacts) setWorkDirOwned(key string, owned bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.workDirs == nil || len(f.workDirs) >= 1024 {
		f.workDirs = map[string]bool{}
	}
	f.workDirs[key] = owned
}
