// Command probe is the compose stack's container healthcheck for the sluice
// image. That image is distroless (no shell, curl or wget), so Docker runs
// this instead: it GETs one URL, normally a part's /readyz, and exits 0 on a
// 2xx answer and 1 on anything else, which is what a HEALTHCHECK wants.
//
//	probe http://127.0.0.1:8080/readyz
//	probe --ca-file=/run/sluice/tls/ca.pem https://127.0.0.1:8080/readyz
//
// --ca-file trusts a private CA for an https:// URL (a part serving HTTPS
// with --tls-cert-file, as compose.secure.yaml runs them); without it the
// system's roots are trusted. The certificate is always verified: a probe
// that skipped it would call a part healthy behind the wrong certificate.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	caFile := fs.String("ca-file", "", "PEM file of the CAs trusted for an https:// URL (default: the system's roots)")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: probe [--ca-file=ca.pem] <url>   (exit 0 on a 2xx answer)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil || fs.NArg() != 1 {
		if err == nil {
			fs.Usage()
		}
		os.Exit(2)
	}
	os.Exit(probe(fs.Arg(0), *caFile, os.Stderr))
}

func probe(url, caFile string, stderr io.Writer) int {
	// Shorter than the compose healthcheck's timeout, so a hung part is
	// reported as failing by the probe, with a reason, not killed by Docker.
	client := http.Client{Timeout: 2 * time.Second}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			fmt.Fprintf(stderr, "--ca-file: %v\n", err)
			return 1
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			fmt.Fprintf(stderr, "--ca-file %s: no PEM certificate in it\n", caFile)
			return 1
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
	}
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
