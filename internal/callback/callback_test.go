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
		// Deprecated IPv6 forms (issue 31): IPv4-compatible, IPv4-translated, site-local.
		"::7f00:1": "IPv4-compatible", "::a00:5": "IPv4-compatible", "::5db8:d822": "IPv4-compatible",
		"::ffff:0:7f00:1": "IPv4-translated", "::ffff:0:a9fe:a9fe": "IPv4-translated", "::ffff:0:5db8:d822": "IPv4-translated",
		"fec0::1": "site-local", "feff:ffff::1": "site-local",
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

// TestSignAndVerify: v2 covers the body, the timestamp, the group and the
// attempt; a receiver knowing either secret of a rotation verifies it.
func TestSignAndVerify(t *testing.T) {
	body := []byte(`{"group":"g","items":[]}`)
	open := func() io.Reader { return bytes.NewReader(body) }
	at := time.Unix(1_790_000_000, 0)
	old, cur := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 40))
	signed := Signed{Group: "g", Attempt: "1"}
	h, err := Sign([][]byte{cur, old}, at, signed, false, open)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "t=1790000000,v2=") || strings.Count(h, "v2=") != 2 || strings.Contains(h, "v1=") {
		t.Fatalf("header %q", h)
	}
	for _, secrets := range [][][]byte{{cur}, {old}, {[]byte(strings.Repeat("x", 32)), cur}} {
		if err := Verify(h, body, signed, secrets, at.Add(time.Minute), VerifyOptions{V2Only: true}); err != nil {
			t.Errorf("a receiver knowing %q: %v", secrets, err)
		}
	}
	if err := Verify(h, body, signed, [][]byte{[]byte(strings.Repeat("z", 32))}, at, VerifyOptions{}); !errors.Is(err, ErrBadSignature) {
		t.Errorf("an unknown secret: %v", err)
	}
	if err := Verify(h, append([]byte(nil), append(body, ' ')...), signed, [][]byte{cur}, at, VerifyOptions{}); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a changed body: %v", err)
	}
	if err := Verify(h, body, signed, [][]byte{cur}, at.Add(10*time.Minute), VerifyOptions{}); !errors.Is(err, ErrStale) {
		t.Errorf("a replay 10 min later: %v", err)
	}
	if err := Verify("", body, signed, [][]byte{cur}, at, VerifyOptions{}); !errors.Is(err, ErrNoSignature) {
		t.Errorf("no header: %v", err)
	}
}

// TestSignatureV2CoversGroupAndAttempt: a v2 signature moved to another
// group's callback, or replayed as another attempt, fails; so does a
// header whose v2 was stripped, for a receiver past the transition
// (V2Only). During the transition a v1-only header (an older coordinator)
// still verifies, and a header carrying both is checked by its v2.
func TestSignatureV2CoversGroupAndAttempt(t *testing.T) {
	body := []byte(`{"group":"g1"}`)
	open := func() io.Reader { return bytes.NewReader(body) }
	at := time.Unix(1_790_000_000, 0)
	key := [][]byte{[]byte(strings.Repeat("k", 32))}
	signed := Signed{Group: "g1", Attempt: "2"}
	both, err := Sign(key, at, signed, true, open)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(both, ",v2=") || !strings.Contains(both, ",v1=") {
		t.Fatalf("header %q: want v2 and v1", both)
	}
	if err := Verify(both, body, signed, key, at, VerifyOptions{}); err != nil {
		t.Fatalf("the signed callback: %v", err)
	}
	for name, s := range map[string]Signed{"another group": {Group: "g2", Attempt: "2"}, "another attempt": {Group: "g1", Attempt: "3"}} {
		if err := Verify(both, body, s, key, at, VerifyOptions{}); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
	// Strip the v2 value: the v1 left covers neither group nor attempt.
	var v1only []string
	for _, p := range strings.Split(both, ",") {
		if !strings.HasPrefix(p, "v2=") {
			v1only = append(v1only, p)
		}
	}
	stripped := strings.Join(v1only, ",")
	if err := Verify(stripped, body, Signed{Group: "g2", Attempt: "9"}, key, at, VerifyOptions{V2Only: true}); !errors.Is(err, ErrNoV2) {
		t.Errorf("a stripped header, V2Only: %v, want ErrNoV2", err)
	}
	if err := Verify(stripped, body, signed, key, at, VerifyOptions{}); err != nil {
		t.Errorf("a v1-only header during the transition: %v", err)
	}
}

// TestShortSecretsAreRefused: no secret, or one under 32 bytes, is refused
// by Sign and Verify with ErrShortSecret, whatever the header.
func TestShortSecretsAreRefused(t *testing.T) {
	body := []byte("{}")
	open := func() io.Reader { return bytes.NewReader(body) }
	at := time.Unix(1_790_000_000, 0)
	for _, keys := range [][][]byte{nil, {}, {[]byte("")}, {[]byte(strings.Repeat("a", 31))}, {[]byte(strings.Repeat("a", 32)), []byte("short")}} {
		if _, err := Sign(keys, at, Signed{}, false, open); !errors.Is(err, ErrShortSecret) {
			t.Errorf("Sign with %d secrets: %v, want ErrShortSecret", len(keys), err)
		}
		if err := Verify("t=1790000000,v2=00", body, Signed{}, keys, at, VerifyOptions{}); !errors.Is(err, ErrShortSecret) {
			t.Errorf("Verify with %d secrets: %v, want ErrShortSecret", len(keys), err)
		}
	}
}

func TestReadSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		f := filepath.Join(dir, "s")
		os.WriteFile(f, []byte(s), 0o600)
		return f
	}
	long1, long2 := strings.Repeat("n", 32), strings.Repeat("o", 48)
	got, err := ReadSecrets(write("# rotated on 2026-11-25\n" + long1 + "\n\n" + long2 + "\n"))
	if err != nil || len(got) != 2 || string(got[0]) != long1 {
		t.Fatalf("%q %v", got, err)
	}
	for _, bad := range []string{"", "# only a comment\n", long1 + "\n" + long1 + "\n" + long2 + "\n", "b\n", long1 + "\nshort-secret\n"} {
		if _, err := ReadSecrets(write(bad)); err == nil || strings.Contains(err.Error(), "b\n") || strings.Contains(err.Error(), "short-secret") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	f := write(long1 + "\n")
	os.Chmod(f, 0o644)
	if _, err := ReadSecrets(f); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a secrets file others can read: %v", err)
	}
}

// TestGuardRefusesItsOwnListeners: a listener of the part's own is refused
// by URL and by dial even when the allow-list opens loopback (sluice dev),
// by address, by an allowed name, and through an unspecified listener's
// port; another port on loopback stays allowed.
func TestGuardRefusesItsOwnListeners(t *testing.T) {
	g, err := NewGuard([]string{"127.0.0.0/8", "::1", "localhost"}, names{"localhost": {"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.RefuseListener("127.0.0.1:8084"); err != nil {
		t.Fatal(err)
	}
	if err := g.RefuseListener("[::]:9090"); err != nil {
		t.Fatal(err)
	}
	if err := g.RefuseListener("localhost:7070"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for url, refused := range map[string]bool{
		"http://127.0.0.1:8084/api/v1/dlq/purge": true,
		"http://localhost:8084/api/v1/dlq/purge": true,
		"http://0.0.0.0:8084/":                   true,
		"http://[::ffff:127.0.0.1]:8084/":        true,
		"http://127.0.0.1:9090/":                 true, // the unspecified listener's port on loopback
		"http://[::1]:9090/":                     true,
		"http://127.0.0.1:8085/hook":             false,
		"http://localhost:8085/hook":             false,
		"http://127.0.0.1:7070/":                 true, // a listener given by name
	} {
		err := g.CheckURL(ctx, url)
		var r *RefusedError
		if got := errors.As(err, &r) && r.Own; got != refused {
			t.Errorf("%s: %v, want refused as own listener: %v", url, err, refused)
		}
	}
	dial := g.DialContext(func(context.Context, string, string) (net.Conn, error) {
		t.Fatal("the guard dialled its own listener")
		return nil, nil
	})
	if _, err := dial(ctx, "tcp", "localhost:8084"); !IsRefused(err) {
		t.Errorf("dial to its own listener: %v", err)
	}
	if err := g.RefuseListener("nonsense"); err == nil {
		t.Error("a listener address without a port was taken")
	}
}
