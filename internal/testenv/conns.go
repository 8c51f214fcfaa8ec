package testenv

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"
)

// ConnLimitSlack is how much later than its configured timeout a server
// may close a connection in AssertSlowBodyClosed and AssertIdleClosed: a
// busy 2-core machine schedules late, never early.
const ConnLimitSlack = 3 * time.Second

// AssertSlowBodyClosed sends the server at addr a POST whose body never
// ends (its headers promise 1,000 bytes, one comes) and fails t unless
// the server closes the connection within readTimeout (plus
// ConnLimitSlack) of the request's first byte: a slow body holds no
// connection longer than the server's read timeout, whatever the route
// and before any authentication.
func AssertSlowBodyClosed(t testing.TB, addr string, readTimeout time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, "POST /v1/topics/jobs/jobs HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	if err := untilClosed(conn, readTimeout+ConnLimitSlack); err != nil {
		t.Fatalf("a body that never ends: %v after %s (read timeout %s)", err, time.Since(start).Round(time.Millisecond), readTimeout)
	}
	t.Logf("a body that never ends: closed by the server after %s (read timeout %s)", time.Since(start).Round(time.Millisecond), readTimeout)
}

// AssertIdleClosed asks the server at addr for path on a keep-alive
// connection, reads the answer, then fails t unless the server closes the
// idle connection within idleTimeout (plus ConnLimitSlack).
func AssertIdleClosed(t testing.TB, addr, path string, idleTimeout time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: sluice\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		t.Fatalf("GET %s: the server closes the connection after the answer (status %d): no keep-alive to test", path, resp.StatusCode)
	}
	start := time.Now()
	if err := untilClosed(readerConn{br, conn}, idleTimeout+ConnLimitSlack); err != nil {
		t.Fatalf("an idle keep-alive connection: %v after %s (idle timeout %s)", err, time.Since(start).Round(time.Millisecond), idleTimeout)
	}
	t.Logf("an idle keep-alive connection: closed by the server after %s (idle timeout %s)", time.Since(start).Round(time.Millisecond), idleTimeout)
}

// readerConn reads through a bufio.Reader what a net.Conn receives.
type readerConn struct {
	r io.Reader
	net.Conn
}

func (c readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// untilClosed reads conn until the server closes it (EOF or a reset),
// or fails once within passed.
func untilClosed(conn net.Conn, within time.Duration) error {
	conn.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, conn)
	switch {
	case err == nil:
		return nil // EOF: the server closed it
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errors.New("still open")
	case errors.Is(err, syscall.ECONNRESET):
		return nil // the server closed it with bytes unread
	}
	return err
}

// AssertConnLimits runs AssertSlowBodyClosed and AssertIdleClosed (on
// path) as subtests against the server at addr, whose read and idle
// timeouts are readTimeout and idleTimeout.
func AssertConnLimits(t *testing.T, addr, path string, readTimeout, idleTimeout time.Duration) {
	t.Helper()
	t.Run("slow body", func(t *testing.T) { AssertSlowBodyClosed(t, addr, readTimeout) })
	t.Run("idle", func(t *testing.T) { AssertIdleClosed(t, addr, path, idleTimeout) })
}
