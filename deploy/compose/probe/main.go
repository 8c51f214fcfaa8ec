// Command probe is the compose stack's container healthcheck for the sluice
// image. That image is distroless (no shell, curl or wget), so Docker runs
// this instead: it GETs one URL, normally a part's /readyz, and exits 0 on a
// 2xx answer and 1 on anything else, which is what a HEALTHCHECK wants.
//
//	probe http://127.0.0.1:8080/readyz
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: probe <url>   (exit 0 on a 2xx answer)")
		os.Exit(2)
	}
	os.Exit(probe(os.Args[1], os.Stderr))
}

func probe(url string, stderr io.Writer) int {
	// Shorter than the compose healthcheck's timeout, so a hung part is
	// reported as failing by the probe, with a reason, not killed by Docker.
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer resp.Body.Close()
	// The body says why a part is not ready; Docker keeps it in the
	// container's health log.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintf(stderr, "%s: %s %s\n", url, resp.Status, body)
		return 1
	}
	return 0
}
