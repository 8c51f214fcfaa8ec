package ops

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestNewServerSetsEveryLimit: a server from NewServer has every timeout
// and the header limit set, a zero field taking its default, so a program
// or test that builds a Config by hand still gets bounded connections.
func TestNewServerSetsEveryLimit(t *testing.T) {
	d := DefaultHTTPLimits()
	srv := NewServer(http.NotFoundHandler(), HTTPLimits{ReadTimeout: 3 * time.Second}, nil)
	if srv.ReadTimeout != 3*time.Second || srv.ReadHeaderTimeout != d.ReadHeaderTimeout || srv.WriteTimeout != d.WriteTimeout ||
		srv.IdleTimeout != d.IdleTimeout || srv.MaxHeaderBytes != d.MaxHeaderBytes {
		t.Fatalf("server limits %v %v %v %v %d, want read 3s and the defaults %+v", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes, d)
	}
	for name, v := range map[string]time.Duration{"ReadHeaderTimeout": d.ReadHeaderTimeout, "ReadTimeout": d.ReadTimeout, "WriteTimeout": d.WriteTimeout, "IdleTimeout": d.IdleTimeout} {
		if v <= 0 {
			t.Errorf("default %s is %v: unbounded", name, v)
		}
	}
}

func TestCheckLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:6060": true, "[::1]:6060": true, "localhost:6060": true, "127.0.0.2:1": true,
		":6060": false, "0.0.0.0:6060": false, "[::]:6060": false, "10.0.0.1:6060": false, "example.com:6060": false, "127.0.0.1": false,
	} {
		err := CheckLoopback(addr)
		if (err == nil) != ok {
			t.Errorf("CheckLoopback(%q) = %v, want ok=%v", addr, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), addr) {
			t.Errorf("CheckLoopback(%q): %v does not name the address", addr, err)
		}
	}
	ln, err := ListenLoopback("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}
