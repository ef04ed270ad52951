package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/threadbox/threadbox/bot"
	"github.com/threadbox/threadbox/db"
)

// runAdmin is the operator CLI: the chat's admin commands with direct database and provider access.
// The operator is audited as cli:<unix user>; having the config and the database is the authority,
// so the CLI needs no admin.users entry. When a running `threadbox serve` holds the SQLite database,
// the command goes to that process's admin API on http.addr instead (audited there as web:local with
// http.trust_loopback, else as web:token with http.token); so does drain, always, since it acts on
// the serve process's own turns.
func (m *Main) runAdmin(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(m.Stdout, "usage: threadbox admin <command>\n\n"+bot.AdminHelp)
		return nil
	}
	if strings.EqualFold(args[0], "drain") {
		// Drain acts on a running process's turns: a pool built here has none, and draining it would
		// report success while the replica goes on taking turns.
		return m.adminOverHTTP(ctx, args, "drain acts on the threadbox serve running on this host")
	}
	actor := "cli:" + osUser()
	m.Config.Admin.Users = append(m.Config.Admin.Users, actor)
	a, err := m.buildApp(ctx)
	if errors.Is(err, db.ErrLocked) {
		return m.adminOverHTTP(ctx, args, "the database is held by a running threadbox serve")
	}
	if err != nil {
		return err
	}
	defer a.shutdown(m.Logger, 5*time.Second)
	out, err := a.admin.Run(ctx, actor, args)
	fmt.Fprintln(m.Stdout, out)
	if err != nil {
		return exitCode(1)
	}
	return nil
}

func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "unknown"
}

// adminOverHTTP sends the command to the serve process at http.addr; why says why it must go there.
func (m *Main) adminOverHTTP(ctx context.Context, args []string, why string) error {
	body := map[string]any{}
	cmd, rest := strings.ToLower(args[0]), args[1:]
	if !bot.KnownAdminCommand(cmd) {
		// The command becomes the URL's path: anything else could name another path or a query.
		return fmt.Errorf("unknown admin command %q\n%s", cmd, bot.AdminHelp)
	}
	for i := 0; i < len(rest); i++ {
		switch a := rest[i]; {
		case a == "--dry-run":
			body["dry_run"] = true
		case a == "--status" && i+1 < len(rest):
			body["status"] = rest[i+1]
			i++
		case strings.HasPrefix(a, "--status="):
			body["status"] = strings.TrimPrefix(a, "--status=")
		case body["thread"] == nil:
			body["thread"] = a
		case cmd == "move" && body["provider"] == nil:
			body["provider"] = a
		case cmd == "logs":
			n, err := strconv.Atoi(a)
			if err != nil {
				return fmt.Errorf("logs: n must be a number: %q", a)
			}
			body["lines"] = n
		default:
			return fmt.Errorf("%s: unexpected argument %q", cmd, a)
		}
	}
	raw, _ := json.Marshal(body)
	host, port, _ := net.SplitHostPort(m.Config.HTTP.Addr)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1" // a wildcard listener is reached on loopback, where we are web:local
	}
	endpoint := "http://" + net.JoinHostPort(host, port) + "/api/admin/" + url.PathEscape(cmd)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if m.Config.HTTP.Token != "" {
		req.Header.Set("Authorization", "Bearer "+m.Config.HTTP.Token)
	}
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		return fmt.Errorf("%s, and its admin API at %s does not answer: %w", why, endpoint, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	var out struct {
		Output string `json:"output"`
		Error  string `json:"error"`
	}
	if json.Unmarshal(data, &out) != nil {
		out.Error = strings.TrimSpace(string(data))
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(m.Stdout, out.Error)
		return exitCode(1)
	}
	fmt.Fprintln(m.Stdout, out.Output)
	return nil
}
