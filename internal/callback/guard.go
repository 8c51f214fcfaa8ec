// Package callback is what guards and signs the coordinator's callbacks:
// where a callback may go (Guard: checked at the gate when a group names
// its URL, and again when the coordinator dials, after resolving the
// name), and the signature a receiver verifies (Sign, Verify). See
// docs/secure/callbacks.md.
package callback

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Resolver turns a host name into addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DialFunc dials a network address, as net.Dialer.DialContext does.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Guard decides which addresses a callback may reach: public ones, and
// those an operator opened with Allow. The zero Guard refuses every
// non-public address and resolves with net.DefaultResolver.
type Guard struct {
	prefixes []netip.Prefix  // opened by NewGuard's allow-list
	hosts    map[string]bool // host names allowed whatever they resolve to
	// Resolver resolves host names. Default net.DefaultResolver.
	Resolver Resolver

	mu   sync.RWMutex
	self []netip.AddrPort // the part's own listeners (RefuseListener)
	// local are the machine's addresses, for a listener on an
	// unspecified address: read when such a listener is added.
	local []netip.Addr
}

// NewGuard makes a guard that also lets through allow's entries: CIDR
// prefixes ("10.20.0.0/16"), single addresses ("10.20.1.5") and host names
// ("hooks.internal": allowed whatever they resolve to). A nil resolver is
// net.DefaultResolver. Its error names the entry.
func NewGuard(allow []string, resolver Resolver) (*Guard, error) {
	g := &Guard{hosts: map[string]bool{}, Resolver: resolver}
	for _, a := range allow {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
			continue
		case strings.Contains(a, "/"):
			p, err := netip.ParsePrefix(a)
			if err != nil {
				return nil, fmt.Errorf("callback allow-list entry %q: %v", a, err)
			}
			g.prefixes = append(g.prefixes, p.Masked())
		default:
			if ip, err := netip.ParseAddr(a); err == nil {
				g.prefixes = append(g.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
				continue
			}
			if strings.ContainsAny(a, ":/ ") {
				return nil, fmt.Errorf("callback allow-list entry %q: want a CIDR prefix, an address or a host name", a)
			}
			g.hosts[strings.ToLower(strings.TrimSuffix(a, "."))] = true
		}
	}
	if g.Resolver == nil {
		g.Resolver = net.DefaultResolver
	}
	return g, nil
}

// RefusedError is a callback URL or address the guard refuses.
type RefusedError struct {
	URL    string     // the URL, when one was checked
	Host   string     // its host
	Addr   netip.Addr // the address refused (zero when the URL itself is)
	Reason string
	// Own: Addr and Port are a listener of the part's own, refused
	// whatever the allow-list (RefuseListener).
	Own  bool
	Port uint16
}

func (e *RefusedError) Error() string {
	var b strings.Builder
	b.WriteString("callback refused: ")
	switch {
	case e.Own:
		fmt.Fprintf(&b, "%s resolves to %s, a listener of this part's own (its admin API and ops routes must not be a callback's target; no --callback-allow opens it)",
			e.Host, netip.AddrPortFrom(e.Addr, e.Port))
		return b.String()
	case e.Addr.IsValid():
		fmt.Fprintf(&b, "%s resolves to %s, a %s address", e.Host, e.Addr, e.Reason)
	default:
		b.WriteString(e.Reason)
	}
	b.WriteString(" (--callback-allow, on the gate and the coordinator, opens addresses an operator trusts)")
	return b.String()
}

// Public is what a group's submitter may read of the refusal (its
// callback_error): the kind of address, not the address the name resolved
// to where the part runs.
func (e *RefusedError) Public() string {
	switch {
	case e.Own:
		return "callback refused: the URL aims at the coordinator's own listener"
	case e.Addr.IsValid():
		return fmt.Sprintf("callback refused: the URL's host resolves to a %s address, which callbacks may not reach", e.Reason)
	}
	return "callback refused: " + e.Reason
}

// RefuseListener refuses callbacks to a listener of the part's own
// (host:port, as net.Listener.Addr gives it), whatever the allow-list: a
// callback must not drive the part's admin API (sluice dev allows
// loopback). An unspecified host (":8084", "[::]:8084") stands for its port
// on loopback and on every address of the machine's interfaces.
//
// A host name ("localhost:8080", as an operator may give a listen
// address) stands for the addresses it resolves to now.
func (g *Guard) RefuseListener(hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	p, perr := strconv.ParseUint(port, 10, 16)
	if err != nil || perr != nil {
		return fmt.Errorf("callback guard: listener %q: want host:port", hostport)
	}
	var addrs []netip.Addr
	switch ip, ierr := netip.ParseAddr(strings.Trim(host, "[]")); {
	case host == "":
		addrs = []netip.Addr{netip.IPv6Unspecified()}
	case ierr == nil:
		addrs = []netip.Addr{ip.Unmap()}
	case strings.EqualFold(host, "localhost"):
		addrs = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if addrs, err = g.resolve(ctx, host); err != nil {
			return fmt.Errorf("callback guard: listener %q: %w", hostport, err)
		}
	}
	var local []netip.Addr
	for _, a := range addrs {
		if a.IsUnspecified() {
			ifaddrs, _ := net.InterfaceAddrs()
			for _, ia := range ifaddrs {
				if pr, err := netip.ParsePrefix(ia.String()); err == nil {
					local = append(local, pr.Addr().Unmap())
				}
			}
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range addrs {
		g.self = append(g.self, netip.AddrPortFrom(a.Unmap(), uint16(p)))
	}
	g.local = append(g.local, local...)
	return nil
}

// own returns the refusal of addr:port when it is one of the part's
// listeners, else nil. An unspecified target reaches every local listener.
func (g *Guard) own(host string, addr netip.Addr, port uint16) error {
	addr = addr.Unmap()
	g.mu.RLock()
	defer g.mu.RUnlock()
	for _, s := range g.self {
		if s.Port() != port {
			continue
		}
		hit := s.Addr() == addr || addr.IsUnspecified()
		if !hit && s.Addr().IsUnspecified() {
			hit = addr.IsLoopback()
			for _, l := range g.local {
				hit = hit || l == addr
			}
		}
		if hit {
			return &RefusedError{Host: host, Addr: addr, Port: port, Own: true, Reason: "own listener"}
		}
	}
	return nil
}

func (g *Guard) hasOwn() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.self) > 0
}

// urlPort is u's port: its own, else its scheme's.
func urlPort(u *url.URL) uint16 {
	if p, err := strconv.ParseUint(u.Port(), 10, 16); err == nil {
		return uint16(p)
	}
	if u.Scheme == "https" {
		return 443
	}
	return 80
}

// extraRefused are ranges netip's predicates do not name that a callback
// has no business reaching: "this network", carrier-grade NAT (cloud VPCs
// use it), IETF protocol assignments, benchmarking, reserved and
// broadcast, NAT64's well-known prefix (it embeds IPv4 addresses), 6to4 and
// Teredo (they can tunnel to IPv4 ones), and the deprecated IPv6 forms
// below.
var extraRefused = []struct {
	p      netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (carrier-grade NAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	// Deprecated forms that embed or reach inside: IPv4-compatible
	// (::a.b.c.d, RFC 4291), IPv4-translated (::ffff:0:a.b.c.d, RFC 2765)
	// and site-local (RFC 3879). A stack may still route them to the
	// IPv4 address or the site.
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4-translated"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
}

// refusal says why addr is not public ("" when it is).
func refusal(addr netip.Addr) string {
	addr = addr.Unmap()
	switch {
	case addr.IsLoopback():
		return "loopback"
	case addr.IsUnspecified():
		return "unspecified"
	case addr.IsLinkLocalUnicast():
		return "link-local"
	case addr.IsMulticast():
		return "multicast"
	case addr.IsPrivate():
		return "private"
	case addr.Is4() && addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast"
	}
	for _, r := range extraRefused {
		if r.p.Contains(addr) {
			return r.reason
		}
	}
	return ""
}

// CheckAddr returns a *RefusedError when addr is neither public nor
// allowed; host names it in the error.
func (g *Guard) CheckAddr(host string, addr netip.Addr) error {
	addr = addr.Unmap()
	reason := refusal(addr)
	if reason == "" {
		return nil
	}
	for _, p := range g.prefixes {
		if p.Contains(addr) {
			return nil
		}
	}
	return &RefusedError{Host: host, Addr: addr, Reason: reason}
}

// hostAllowed reports whether host is allowed by name.
func (g *Guard) hostAllowed(host string) bool {
	return g.hosts[strings.ToLower(strings.TrimSuffix(host, "."))]
}

// lookupCache keeps the lookups made under one context (WithLookupCache).
type lookupCache struct {
	mu sync.Mutex
	m  map[string]lookupResult
}

type lookupResult struct {
	addrs []netip.Addr
	err   error
}

type lookupCacheKey struct{}

// WithLookupCache returns a context under which the guard looks each host
// name up once, failures included: a batch of jobs whose callback_urls
// share a host (or a slow one) costs one lookup, not one per job.
func WithLookupCache(ctx context.Context) context.Context {
	return context.WithValue(ctx, lookupCacheKey{}, &lookupCache{m: map[string]lookupResult{}})
}

// resolve returns host's addresses: itself when it is one.
func (g *Guard) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{ip.Unmap()}, nil
	}
	if c, ok := ctx.Value(lookupCacheKey{}).(*lookupCache); ok {
		key := strings.ToLower(host)
		c.mu.Lock()
		defer c.mu.Unlock()
		if r, ok := c.m[key]; ok {
			return r.addrs, r.err
		}
		addrs, err := g.lookup(ctx, host)
		c.m[key] = lookupResult{addrs, err}
		return addrs, err
	}
	return g.lookup(ctx, host)
}

func (g *Guard) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	addrs, err := g.Resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("callback host %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("callback host %s has no address", host)
	}
	return addrs, nil
}

// CheckURL checks a callback URL: http or https, a host, and every
// address the host resolves to public or allowed. A resolution failure is
// an error too (not a *RefusedError).
func (g *Guard) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return &RefusedError{URL: raw, Reason: "not a URL: " + err.Error()}
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return &RefusedError{URL: raw, Reason: fmt.Sprintf("scheme %q: only http and https", u.Scheme)}
	}
	if u.User != nil {
		return &RefusedError{URL: raw, Reason: "credentials in the URL are not sent"}
	}
	host := u.Hostname()
	if host == "" {
		return &RefusedError{URL: raw, Reason: "no host"}
	}
	allowed := g.hostAllowed(host)
	if allowed && !g.hasOwn() {
		return nil
	}
	addrs, err := g.resolve(ctx, host)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		err := g.own(host, a, urlPort(u))
		if err == nil && !allowed {
			err = g.CheckAddr(host, a)
		}
		if err != nil {
			err.(*RefusedError).URL = raw
			return err
		}
	}
	return nil
}

// DialContext returns a dial function that resolves the host once,
// refuses it unless every address is public or allowed (as CheckURL), and
// dials the checked address itself, so a name that resolves differently
// on a second lookup (DNS rebinding) cannot move the connection. dial
// opens the connection; nil: a net.Dialer.
func (g *Guard) DialContext(dial DialFunc) DialFunc {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		addrs, err := g.resolve(ctx, host)
		if err != nil {
			return nil, err
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("callback port %q: %w", port, err)
		}
		allowed := g.hostAllowed(host)
		for _, a := range addrs {
			err := g.own(host, a, uint16(p))
			if err == nil && !allowed {
				err = g.CheckAddr(host, a)
			}
			if err != nil {
				return nil, err
			}
		}
		var errs []error
		for _, a := range addrs {
			c, err := dial(ctx, network, net.JoinHostPort(a.String(), port))
			if err == nil {
				return c, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
}

// IsRefused reports whether err is the guard's refusal.
func IsRefused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}
