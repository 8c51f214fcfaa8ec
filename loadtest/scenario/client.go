package scenario

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// httpConn is one keep-alive HTTP/1.1 connection that POSTs and reads the
// answer, with no goroutines or channels of its own. net/http's Transport
// hands each request to two goroutines per connection; on a 2-core machine
// that shares its CPU with the server under test, the generator's own cost
// is part of what is measured, so it is kept small (the same reason wrk is
// used beside it in BENCHMARKS.md).
type httpConn struct {
	host    string // host:port to dial
	head    []byte // "POST <path> HTTP/1.1\r\nHost: ...\r\n<headers>" without Content-Length
	timeout time.Duration
	c       net.Conn
	br      *bufio.Reader
	bw      *bufio.Writer
	body    bytes.Buffer // the last answer's body
}

// newHTTPConn prepares a connection to POST to rawURL; it dials on first use.
func newHTTPConn(rawURL, contentType string, header http.Header, timeout time.Duration) (*httpConn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("loadtest: %q: only http:// URLs are supported", rawURL)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	var h bytes.Buffer
	fmt.Fprintf(&h, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sluice-loadtest\r\n", u.RequestURI(), u.Host)
	if contentType != "" {
		fmt.Fprintf(&h, "Content-Type: %s\r\n", contentType)
	}
	for k, vs := range header {
		for _, v := range vs {
			fmt.Fprintf(&h, "%s: %s\r\n", k, v)
		}
	}
	return &httpConn{host: host, head: h.Bytes(), timeout: timeout}, nil
}

// post sends body and returns the answer's status; its body is in c.body.
// A transport error closes the connection (the next post dials again) and
// returns status 0.
func (c *httpConn) post(body []byte) (int, error) {
	if c.c == nil {
		conn, err := net.DialTimeout("tcp", c.host, 5*time.Second)
		if err != nil {
			return 0, err
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		c.c = conn
		c.br = bufio.NewReaderSize(conn, 16<<10)
		c.bw = bufio.NewWriterSize(conn, 16<<10)
	}
	if c.timeout > 0 {
		c.c.SetDeadline(time.Now().Add(c.timeout))
	}
	c.bw.Write(c.head)
	c.bw.WriteString("Content-Length: ")
	c.bw.WriteString(strconv.Itoa(len(body)))
	c.bw.WriteString("\r\n\r\n")
	c.bw.Write(body)
	if err := c.bw.Flush(); err != nil {
		c.close()
		return 0, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.close()
		return 0, err
	}
	c.body.Reset()
	_, err = c.body.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.close()
		return 0, err
	}
	if resp.Close {
		c.close()
	}
	return resp.StatusCode, nil
}

func (c *httpConn) close() {
	if c.c != nil {
		c.c.Close()
		c.c = nil
	}
}
