package egress

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// defaultPorts are the ports an allowlist entry without a port opens: plain and TLS web traffic,
// which is what package registries and git forges over HTTPS use.
var defaultPorts = []uint16{80, 443}

// rule is one parsed allowlist entry.
type rule struct {
	raw string
	// Exactly one of name, suffix, prefix is set: name is an exact host name, suffix a wildcard's
	// ".example.com", prefix an IP address or CIDR range.
	name   string
	suffix string
	prefix netip.Prefix
	ports  []uint16
}

// Policy is a parsed allowlist: which hosts and ports a sandbox may reach, and which non-public
// addresses the operator named explicitly (IP or CIDR entries).
type Policy struct {
	rules []rule
}

// ParsePolicy parses allowlist entries. Each is one of:
//
//	registry.npmjs.org        that host, on ports 80 and 443
//	*.github.com              any host below github.com (not github.com itself), ports 80 and 443
//	git.example.com:8443      that host, on that port only
//	203.0.113.7 / 203.0.113.7:8080 / [2001:db8::1]:443 / 10.0.0.0/8
//	                          an address or range, named explicitly: the only way a private, loopback
//	                          or link-local address is ever reached
func ParsePolicy(entries []string) (*Policy, error) {
	p := &Policy{}
	for _, e := range entries {
		r, err := parseRule(e)
		if err != nil {
			return nil, fmt.Errorf("sandbox.egress.allow entry %q: %w", e, err)
		}
		p.rules = append(p.rules, r)
	}
	return p, nil
}

func parseRule(raw string) (rule, error) {
	s := strings.ToLower(strings.TrimSpace(raw))
	r := rule{raw: raw, ports: defaultPorts}
	if s == "" {
		return r, fmt.Errorf("empty")
	}
	if strings.Contains(s, "://") || strings.ContainsAny(s, "?#@ ") {
		return r, fmt.Errorf("a host name, address or CIDR range, not a URL")
	}
	if pfx, err := netip.ParsePrefix(s); err == nil {
		r.prefix = pfx.Masked()
		return r, nil
	}
	if strings.Contains(s, "/") {
		return r, fmt.Errorf("a host name, address or CIDR range, not a URL or path")
	}
	host := s
	if h, port, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return r, fmt.Errorf("port %q: must be 1-65535", port)
		}
		host, r.ports = h, []uint16{uint16(n)}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		r.prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		return r, nil
	}
	host = strings.TrimSuffix(host, ".")
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		if err := validName(rest); err != nil {
			return r, err
		}
		r.suffix = "." + rest
		return r, nil
	}
	if err := validName(host); err != nil {
		return r, err
	}
	r.name = host
	return r, nil
}

func validName(h string) error {
	if h == "" || len(h) > 253 || strings.Contains(h, "*") || strings.Contains(h, "..") {
		return fmt.Errorf("%q is not a host name", h)
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return fmt.Errorf("%q is not a host name", h)
		}
	}
	return nil
}

// Empty reports whether nothing is allowed (only the gateway is reachable).
func (p *Policy) Empty() bool { return len(p.rules) == 0 }

// Explicit lists the entries that name addresses (IP or CIDR): doctor shows them, since they are
// the way around the public-address rule.
func (p *Policy) Explicit() []string {
	var out []string
	for _, r := range p.rules {
		if r.prefix.IsValid() {
			out = append(out, r.raw)
		}
	}
	return out
}

// allowsTarget reports whether host (a name, lower case, or an address) and port match an entry.
func (p *Policy) allowsTarget(host string, port uint16) bool {
	addr, isAddr := parseAddr(host)
	for _, r := range p.rules {
		if !slices.Contains(r.ports, port) {
			continue
		}
		switch {
		case isAddr && r.prefix.IsValid() && r.prefix.Contains(addr):
			return true
		case !isAddr && r.name != "" && r.name == host:
			return true
		case !isAddr && r.suffix != "" && strings.HasSuffix(host, r.suffix):
			return true
		}
	}
	return false
}

// spells reports whether an entry names host (a name, lower case) itself on port, not by a wildcard.
func (p *Policy) spells(host string, port uint16) bool {
	for _, r := range p.rules {
		if r.name != "" && r.name == host && slices.Contains(r.ports, port) {
			return true
		}
	}
	return false
}

// names reports whether an address entry covers a on port: an address the operator wrote down may
// be reached even when it is not public, but only on that entry's ports (10.0.0.5:8080 opens 8080,
// not whatever port a name on the allowlist that resolves to 10.0.0.5 asks for).
func (p *Policy) names(a netip.Addr, port uint16) bool {
	for _, r := range p.rules {
		if r.prefix.IsValid() && r.prefix.Contains(a) && slices.Contains(r.ports, port) {
			return true
		}
	}
	return false
}

func parseAddr(host string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// Ranges that are not the public internet, beyond what netip's predicates cover.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT: often the provider's own network
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64: embeds an IPv4 address the check would not see
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("2002::/16"),       // 6to4: likewise embeds IPv4
	netip.MustParsePrefix("2001::/32"),       // Teredo
	netip.MustParsePrefix("fec0::/10"),       // deprecated site-local
	netip.MustParsePrefix("::/8"),            // reserved by the IETF: IPv4-compatible (::a.b.c.d) and IPv4-translated (::ffff:0:a.b.c.d) addresses embed IPv4 the check would not see (::1 and :: are classed above, ::ffff:a.b.c.d is unmapped)
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
}

// addrClass says why a is not a public address ("" when it is). host lists the bot host's own
// addresses, which are refused whatever their class (a public IP of the host serves its ports too).
func addrClass(a netip.Addr, host []netip.Addr) string {
	a = a.Unmap()
	switch {
	case slices.Contains(host, a):
		return "an address of the bot's host"
	case a.IsLoopback():
		return "loopback"
	case a.IsLinkLocalUnicast():
		return "link-local (the cloud metadata address is one)"
	case a.IsPrivate():
		return "private"
	case a.IsUnspecified(), a.IsMulticast(), a.IsInterfaceLocalMulticast(), a.IsLinkLocalMulticast():
		return "not a unicast address"
	case !a.IsGlobalUnicast():
		return "not a global address"
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return "reserved (" + p.String() + ")"
		}
	}
	return ""
}
