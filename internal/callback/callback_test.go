package callback

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// names is a resolver of made-up names: no lookup leaves the process.
type names map[string][]string

func (n names) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range n[host] {
		out = append(out, netip.MustParseAddr(a))
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

func TestGuardRefusesWhatIsNotPublic(t *testing.T) {
	g, err := NewGuard(nil, names{})
	if err != nil {
		t.Fatal(err)
	}
	for addr, reason := range map[string]string{
		"127.0.0.1": "loopback", "127.9.9.9": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"10.1.2.3": "private", "172.16.0.1": "private", "192.168.1.1": "private", "fd00:ec2::254": "private",
		"169.254.169.254": "link-local", "fe80::1": "link-local",
		"0.0.0.0": "unspecified", "::": "unspecified", "224.0.0.1": "multicast", "ff02::1": "multicast",
		"100.64.0.1": "shared (carrier-grade NAT)", "255.255.255.255": "broadcast", "64:ff9b::a00:1": "NAT64",
	} {
		err := g.CheckAddr("h", netip.MustParseAddr(addr))
		var r *RefusedError
		if !errors.As(err, &r) || r.Reason != reason {
			t.Errorf("%s: %v, want refused as %s", addr, err, reason)
		}
	}
	for _, addr := range []string{"93.184.216.34", "2606:2800:220:1::1", "203.0.113.7"} {
		if err := g.CheckAddr("h", netip.MustParseAddr(addr)); err != nil {
			t.Errorf("%s: %v, want allowed", addr, err)
		}
	}
}

func TestGuardAllowListAndURLs(t *testing.T) {
	res := names{
		"public.test":   {"203.0.113.7"},
		"private.test":  {"10.0.0.5"},
		"mixed.test":    {"203.0.113.7", "192.168.0.9"},
		"internal.test": {"10.9.9.9"},
		"meta.test":     {"169.254.169.254"},
	}
	g, err := NewGuard([]string{"10.20.0.0/16", "192.168.0.9", "internal.test"}, res)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for url, want := range map[string]string{
		"https://public.test/hook":         "",
		"http://203.0.113.7:8080/x":        "",
		"http://10.20.3.4/x":               "",             // allowed prefix
		"http://mixed.test/x":              "",             // 192.168.0.9 is allowed
		"http://internal.test/x":           "",             // allowed by name
		"http://private.test/x":            "private",      // a name resolving inside
		"http://meta.test/latest":          "link-local",   // cloud metadata by name
		"http://169.254.169.254/latest":    "link-local",   // and by address
		"http://127.0.0.1:8083/api/v1/dlq": "loopback",     // the admin API
		"http://[::1]:8083/":               "loopback",     // IPv6 literal
		"http://localhost:8083/":           "no such host", // not a name the test resolver knows
		"ftp://public.test/x":              "scheme",
		"http://user:pw@public.test/x":     "credentials",
		"javascript:alert(1)":              "scheme",
	} {
		err := g.CheckURL(ctx, url)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v, want allowed", url, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want refused: %s", url, err, want)
		}
	}
	if _, err := NewGuard([]string{"10.0.0.0/33"}, nil); err == nil || !strings.Contains(err.Error(), "10.0.0.0/33") {
		t.Errorf("a bad prefix: %v", err)
	}
}

// TestDialDialsTheAddressItChecked: the dialer is handed the checked
// address, never the name, and refuses before dialling anything inside.
func TestDialDialsTheAddressItChecked(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	var dialled []string
	guardDial := func(ctx context.Context, network, address string) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(address)
		if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
			t.Fatalf("the guard let a dial to %s through", address)
		}
		dialled = append(dialled, address)
		return (&net.Dialer{}).DialContext(ctx, network, address)
	}
	g, err := NewGuard([]string{"receiver.test"}, names{"receiver.test": {"127.0.0.1"}, "inside.test": {"10.0.0.5"}})
	if err != nil {
		t.Fatal(err)
	}
	dial := g.DialContext(guardDial)
	c, err := dial(context.Background(), "tcp", net.JoinHostPort("receiver.test", port))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if len(dialled) != 1 || dialled[0] != "127.0.0.1:"+port {
		t.Fatalf("dialled %v, want the resolved address", dialled)
	}
	if _, err := dial(context.Background(), "tcp", "inside.test:80"); !IsRefused(err) {
		t.Fatalf("a name resolving to a private address: %v", err)
	}
	if _, err := dial(context.Background(), "tcp", "127.0.0.1:"+port); !IsRefused(err) {
		t.Fatalf("loopback by address: %v", err)
	}
}

func TestSignAndVerify(t *testing.T) {
	body := []byte(`{"group":"g","items":[]}`)
	open := func() io.Reader { return bytes.NewReader(body) }
	at := time.Unix(1_790_000_000, 0)
	old, cur := []byte("old-secret"), []byte("new-secret")
	h, err := Sign([][]byte{cur, old}, at, open)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "t=1790000000,v1=") || strings.Count(h, "v1=") != 2 {
		t.Fatalf("header %q", h)
	}
	for _, secrets := range [][][]byte{{cur}, {old}, {[]byte("x"), cur}} {
		if err := Verify(h, body, secrets, at.Add(time.Minute), 0); err != nil {
			t.Errorf("a receiver knowing %q: %v", secrets, err)
		}
	}
	if err := Verify(h, body, [][]byte{[]byte("other")}, at, 0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("an unknown secret: %v", err)
	}
	if err := Verify(h, append([]byte(nil), append(body, ' ')...), [][]byte{cur}, at, 0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a changed body: %v", err)
	}
	if err := Verify(h, body, [][]byte{cur}, at.Add(10*time.Minute), 0); !errors.Is(err, ErrStale) {
		t.Errorf("a replay 10 min later: %v", err)
	}
	if err := Verify("", body, [][]byte{cur}, at, 0); !errors.Is(err, ErrNoSignature) {
		t.Errorf("no header: %v", err)
	}
}

func TestReadSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		f := filepath.Join(dir, "s")
		os.WriteFile(f, []byte(s), 0o600)
		return f
	}
	got, err := ReadSecrets(write("# rotated on 2026-11-25\nnew-secret\n\nold-secret\n"))
	if err != nil || len(got) != 2 || string(got[0]) != "new-secret" {
		t.Fatalf("%q %v", got, err)
	}
	for _, bad := range []string{"", "# only a comment\n", "a\nb\nc\n"} {
		if _, err := ReadSecrets(write(bad)); err == nil || strings.Contains(err.Error(), "b\n") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
