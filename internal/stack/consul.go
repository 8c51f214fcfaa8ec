package stack

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ModulePath is the module whose root holds bin/consul.
const ModulePath = "github.com/sluicehq/sluice"

const consulMissing = "consul agent not found: run `make consul` (builds the pinned v1.15.4 agent into bin/consul) or set SLUICE_CONSUL_BIN"

// FindConsul returns the Consul agent binary to run: $SLUICE_CONSUL_BIN if
// set, else bin/consul under the module root (found by walking up from the
// working directory to the go.mod of ModulePath), else a consul beside the
// running executable (bin/sluice next to bin/consul, run from anywhere),
// else consul from PATH.
func FindConsul() (string, error) {
	if bin := os.Getenv("SLUICE_CONSUL_BIN"); bin != "" {
		path, err := exec.LookPath(bin)
		if err != nil {
			return "", fmt.Errorf("SLUICE_CONSUL_BIN=%s: %v; %s", bin, err, consulMissing)
		}
		return path, nil
	}
	if root, err := ModuleRoot(); err == nil {
		bin := filepath.Join(root, "bin", "consul")
		if path, err := exec.LookPath(bin); err == nil {
			return path, nil
		}
	}
	if exe, err := os.Executable(); err == nil {
		if path, err := exec.LookPath(filepath.Join(filepath.Dir(exe), "consul")); err == nil {
			return path, nil
		}
	}
	if path, err := exec.LookPath("consul"); err == nil {
		return path, nil
	}
	return "", errors.New(consulMissing)
}

// ModuleRoot walks up from the working directory to the directory whose
// go.mod declares ModulePath. Tests run in their package's directory, and
// `sluice dev` usually in a checkout, so this finds bin/ in both.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if f, err := os.Open(filepath.Join(dir, "go.mod")); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				if len(fields) >= 2 && fields[0] == "module" && strings.Trim(fields[1], `"`) == ModulePath {
					f.Close()
					return dir, nil
				}
			}
			f.Close()
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod for %s above the working directory", ModulePath)
		}
		dir = parent
	}
}

// ConsulConfig configures a Consul agent child process in dev mode.
type ConsulConfig struct {
	// Bin is the consul binary, overriding FindConsul.
	Bin string
	// HTTPAddr is the "127.0.0.1:PORT" address of the HTTP API. Required.
	HTTPAddr string
	// Dir is the working directory, holding consul.log unless Stdout is
	// set. Required; created if missing. Dev mode keeps its state in
	// memory, not here.
	Dir string
	// Stdout receives the agent's log, overriding Dir/consul.log.
	Stdout io.Writer
	// ManagementToken, when set, turns ACLs on with default_policy
	// "deny" and makes it the initial management token (and the agent's
	// own): every request then needs a token. Default "": ACLs off.
	ManagementToken string
	// TLS, when set, serves the HTTP API over HTTPS only, on HTTPAddr's
	// port, with these PEM files; clients need no certificate. Default
	// nil: plain HTTP.
	TLS *ConsulTLS
}

// ConsulTLS are the agent's PEM files for HTTPS.
type ConsulTLS struct {
	CAFile, CertFile, KeyFile string
}

// Consul is a running (or stopped) `consul agent -dev` child process: a single
// server that elects itself leader and keeps everything in memory.
type Consul struct {
	cfg  ConsulConfig
	bin  string
	http *http.Client

	mu sync.Mutex
	p  *proc
}

// StartConsul starts the agent and waits until it has a leader and a KV write
// goes through. Only the HTTP API listens on a port the caller chose; the serf
// LAN and server RPC ports, which a server cannot do without, are chosen free
// and chosen again if one was taken meanwhile; DNS, gRPC, gRPC TLS and serf
// WAN are disabled.
func StartConsul(ctx context.Context, cfg ConsulConfig) (*Consul, error) {
	if cfg.HTTPAddr == "" {
		return nil, errors.New("stack: ConsulConfig.HTTPAddr is required")
	}
	if cfg.Dir == "" {
		return nil, errors.New("stack: ConsulConfig.Dir is required")
	}
	if _, _, err := net.SplitHostPort(cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("stack: bad consul HTTP address %q: %w", cfg.HTTPAddr, err)
	}
	bin := cfg.Bin
	if bin == "" {
		var err error
		if bin, err = FindConsul(); err != nil {
			return nil, err
		}
	} else if _, err := exec.LookPath(bin); err != nil {
		return nil, fmt.Errorf("%s (%v)", consulMissing, err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating consul dir: %w", err)
	}
	c := &Consul{cfg: cfg, bin: bin, http: &http.Client{Timeout: 2 * time.Second}}
	if cfg.TLS != nil {
		pem, err := os.ReadFile(cfg.TLS.CAFile)
		if err != nil {
			return nil, fmt.Errorf("stack: consul CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("stack: consul CA %s holds no certificate", cfg.TLS.CAFile)
		}
		c.http.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	if cfg.ManagementToken != "" || cfg.TLS != nil {
		if err := writeConsulConfig(cfg); err != nil {
			return nil, err
		}
	}
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Consul) start(ctx context.Context) error {
	var err error
	for range 3 {
		if err = c.startOnce(ctx); !errors.Is(err, ErrAddrInUse) {
			return err
		}
		// If our HTTP address is the one taken, new internal ports will
		// not help: that is the caller's to fix.
		if ferr := CheckAddrFree(c.cfg.HTTPAddr, "consul http", ""); ferr != nil {
			return fmt.Errorf("%w\n%v", ferr, err)
		}
	}
	return err
}

func (c *Consul) startOnce(ctx context.Context) error {
	host, httpPort, _ := net.SplitHostPort(c.cfg.HTTPAddr)
	serfLAN, err := FreePort()
	if err != nil {
		return err
	}
	server, err := FreePort()
	if err != nil {
		return err
	}
	var id [4]byte
	rand.Read(id[:])
	args := []string{
		"agent", "-dev",
		"-node", fmt.Sprintf("sluice-%d-%s", os.Getpid(), hex.EncodeToString(id[:])),
		"-bind", host,
		"-client", host,
		"-serf-lan-port", strconv.Itoa(serfLAN),
		"-server-port", strconv.Itoa(server),
		"-serf-wan-port", "-1",
		"-dns-port", "-1",
		"-grpc-port", "-1",
		"-grpc-tls-port", "-1",
		"-log-level", "info", // dev mode defaults to debug
	}
	if c.cfg.TLS == nil {
		args = append(args, "-http-port", httpPort)
	} else {
		args = append(args, "-http-port", "-1", "-https-port", httpPort)
	}
	if c.cfg.ManagementToken != "" || c.cfg.TLS != nil {
		args = append(args, "-config-file", filepath.Join(c.cfg.Dir, consulConfigFile))
	}
	p, err := startProc("consul agent", c.bin, args, c.cfg.Dir, "consul.log", c.cfg.Stdout)
	if err != nil {
		return err
	}
	// A server agent without leave_on_terminate answers SIGTERM with a
	// quick shutdown and exit code 1. We keep it that way: a graceful
	// leave would wait out leave_drain_time (5s) and tell no one, since a
	// dev agent is a cluster of one.
	p.termCodes = []int{1}
	c.mu.Lock()
	c.p = p
	c.mu.Unlock()
	if err := p.waitReady(ctx, c.ready); err != nil {
		p.kill()
		return err
	}
	return nil
}

// ready checks that there is a leader and that a KV write is accepted: the
// leader is known a moment before the KV store takes writes.
func (c *Consul) ready(ctx context.Context) error {
	base := c.URL()
	body, err := c.do(ctx, http.MethodGet, base+"/v1/status/leader", nil)
	if err != nil {
		return err
	}
	if leader := strings.Trim(strings.TrimSpace(string(body)), `"`); leader == "" {
		return errors.New("no leader yet")
	}
	const key = "/v1/kv/_sluice/stack/ready"
	body, err = c.do(ctx, http.MethodPut, base+key, []byte("1"))
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(body)) != "true" {
		return fmt.Errorf("KV PUT answered %q", body)
	}
	// Leave the KV store as empty as we found it.
	_, err = c.do(ctx, http.MethodDelete, base+key, nil)
	return err
}

func (c *Consul) do(ctx context.Context, method, url string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if c.cfg.ManagementToken != "" {
		req.Header.Set("X-Consul-Token", c.cfg.ManagementToken)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// consulConfigFile holds the ACL and TLS settings, in Dir.
const consulConfigFile = "consul.json"

// writeConsulConfig writes the settings no flag of the agent takes: ACLs
// (default deny, the management token) and the HTTPS files.
func writeConsulConfig(cfg ConsulConfig) error {
	conf := map[string]any{}
	if cfg.ManagementToken != "" {
		conf["acl"] = map[string]any{
			"enabled":        true,
			"default_policy": "deny",
			"down_policy":    "extend-cache",
			"tokens": map[string]any{
				"initial_management": cfg.ManagementToken,
				// The agent registers its own node with it.
				"agent": cfg.ManagementToken,
			},
		}
	}
	if t := cfg.TLS; t != nil {
		conf["tls"] = map[string]any{"defaults": map[string]any{
			"ca_file": t.CAFile, "cert_file": t.CertFile, "key_file": t.KeyFile,
			"verify_incoming": false, "verify_outgoing": false,
		}}
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	// The file holds the management token: the user's alone.
	return os.WriteFile(filepath.Join(cfg.Dir, consulConfigFile), b, 0o600)
}

// URL is the base URL of the HTTP API: https:// when TLS is on.
func (c *Consul) URL() string {
	if c.cfg.TLS != nil {
		return "https://" + c.cfg.HTTPAddr
	}
	return "http://" + c.cfg.HTTPAddr
}

// HTTPAddr returns the address of the HTTP API.
func (c *Consul) HTTPAddr() string { return c.cfg.HTTPAddr }

// Dir returns the working directory.
func (c *Consul) Dir() string { return c.cfg.Dir }

// Running reports whether the child process is alive.
func (c *Consul) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p != nil && !c.p.exited()
}

// Exited is closed when the current run of the child exits, for whatever
// reason: a caller that expects it to run can watch it instead of polling.
// After Restart, call it again for the new run.
func (c *Consul) Exited() <-chan struct{} { return exitedChan(c.cur()) }

func (c *Consul) cur() *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p
}

// Stop sends SIGTERM and waits for the agent to exit, which takes
// milliseconds: the agent shuts down without a graceful leave, as there are
// no other members to tell. If ctx ends first the process is killed with
// SIGKILL. Stopping a stopped agent is a no-op.
func (c *Consul) Stop(ctx context.Context) error {
	if p := c.cur(); p != nil {
		return p.stop(ctx)
	}
	return nil
}

// Kill kills the agent with SIGKILL and waits for it.
func (c *Consul) Kill() error {
	if p := c.cur(); p != nil {
		p.kill()
	}
	return nil
}

// Restart stops the agent if it is running and starts a new one on the same
// HTTP address. Dev mode keeps all state in memory, so the new agent's KV
// store, sessions and catalog are empty: a restart looks like losing the
// whole Consul cluster, not like a server bouncing.
func (c *Consul) Restart(ctx context.Context) error {
	if err := c.Stop(ctx); err != nil {
		return err
	}
	return c.start(ctx)
}
