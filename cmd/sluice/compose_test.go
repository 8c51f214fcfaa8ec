package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/consul"
)

// There is no Docker engine where the tests run, so deploy/compose cannot be
// started here. These tests hold the stack to the binary instead, so that a
// renamed flag, a moved port or a forgotten topic fails `go test` rather than
// the first `docker compose up` on someone's host:
//
//   - every sluice service runs a real command, every --flag and SLUICE_*
//     variable it sets is one of that command's flags (read from its own
//     --help, with internal/cli's SLUICE_<PART>_<FLAG> / SLUICE_<FLAG> rules),
//     and each value parses with the command's own flag set;
//   - ports, healthchecks, Prometheus targets and the addresses the parts dial
//     agree with the --listen of the service they name and with depends_on;
//   - the parts agree on the stage and Redis layout; the topics the relays,
//     gate and canaries use are created by kafka-init, with their .dlq; the
//     canary token is a gate token with +canary;
//   - the files mounted into Prometheus and Grafana exist and are the ones
//     their configs load;
//   - the Dockerfile is multi-stage, static, non-root and on go.mod's Go, and
//     .dockerignore keeps nothing out that the build needs.

var (
	composeRoot = filepath.Join("..", "..")
	composeDir  = filepath.Join(composeRoot, "deploy", "compose")

	composeDigitRE      = regexp.MustCompile(`\d`)                     // an image tag that names a version
	composeCGOSetRE     = regexp.MustCompile(`\bCGO_ENABLED[= ]"?0\b`) // a Dockerfile ENV or ARG that sets it
	composeShellSplitRE = regexp.MustCompile(`&&|;`)                   // the commands of a RUN
)

// ---- the compose file -------------------------------------------------------

// composeFile is the part of the compose specification the stack uses.
// Decoding is strict (a misspelt key such as "healtcheck" is an error);
// top-level keys other than these must be x- extensions.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
	Networks map[string]any            `yaml:"networks"`
	Secrets  map[string]any            `yaml:"secrets"`
	Configs  map[string]any            `yaml:"configs"`
	Other    map[string]any            `yaml:",inline"`
}

type composeService struct {
	Image           string         `yaml:"image"`
	Build           *composeBuild  `yaml:"build"`
	Hostname        string         `yaml:"hostname"`
	ContainerName   string         `yaml:"container_name"`
	Restart         string         `yaml:"restart"`
	Entrypoint      composeCmd     `yaml:"entrypoint"`
	Command         composeCmd     `yaml:"command"`
	Environment     composeEnv     `yaml:"environment"`
	EnvFile         any            `yaml:"env_file"`
	Ports           []string       `yaml:"ports"` // short syntax
	Expose          []string       `yaml:"expose"`
	Volumes         []string       `yaml:"volumes"` // short syntax
	DependsOn       composeDepends `yaml:"depends_on"`
	Healthcheck     *composeHealth `yaml:"healthcheck"`
	StopGracePeriod string         `yaml:"stop_grace_period"`
	StopSignal      string         `yaml:"stop_signal"`
	User            string         `yaml:"user"`
	Init            *bool          `yaml:"init"`
	ReadOnly        bool           `yaml:"read_only"`
	Tmpfs           any            `yaml:"tmpfs"`
	Labels          any            `yaml:"labels"`
	Deploy          any            `yaml:"deploy"`
	Networks        any            `yaml:"networks"`
	Secrets         any            `yaml:"secrets"`
	Configs         any            `yaml:"configs"`
	Profiles        []string       `yaml:"profiles"`
	Ulimits         any            `yaml:"ulimits"`
	MemLimit        string         `yaml:"mem_limit"`
	CapAdd          []string       `yaml:"cap_add"`
	CapDrop         []string       `yaml:"cap_drop"`
	SecurityOpt     []string       `yaml:"security_opt"`
	Logging         any            `yaml:"logging"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
	Target     string `yaml:"target"`
	// DockerfileInline is a Dockerfile written in the compose file (the
	// secured overlay's certs image: alpine with openssl).
	DockerfileInline string         `yaml:"dockerfile_inline"`
	Args             map[string]any `yaml:"args"`
}

// UnmarshalYAML takes build's short form too: `build: ../..`.
func (b *composeBuild) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		b.Context = n.Value
		return nil
	}
	type plain composeBuild
	return n.Decode((*plain)(b))
}

type composeHealth struct {
	Test          composeCmd `yaml:"test"`
	Interval      string     `yaml:"interval"`
	Timeout       string     `yaml:"timeout"`
	StartPeriod   string     `yaml:"start_period"`
	StartInterval string     `yaml:"start_interval"`
	Retries       int        `yaml:"retries"`
	Disable       bool       `yaml:"disable"`
}

// composeCmd is a command, entrypoint or healthcheck test: a list, or a string
// that a shell splits (shell is then set).
type composeCmd struct {
	args  []string
	shell string
}

func (c *composeCmd) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode {
		c.shell = n.Value
		return nil
	}
	return n.Decode(&c.args)
}

func (c composeCmd) String() string {
	if c.shell != "" {
		return c.shell
	}
	return strings.Join(c.args, " ")
}

// composeEnv is a service's environment, from the map or the list form; a
// nil value is a variable passed through from the host.
type composeEnv map[string]*string

// composeListOrMap decodes compose's list-or-map forms: a list of strings
// is given to item one by one (isList is then true); any other node is
// decoded into m, which applies the << merges of a map.
func composeListOrMap(n *yaml.Node, item func(string), m any) (isList bool, err error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.SequenceNode {
		var list []string
		if err := n.Decode(&list); err != nil {
			return true, err
		}
		for _, s := range list {
			item(s)
		}
		return true, nil
	}
	return false, n.Decode(m)
}

func (e *composeEnv) UnmarshalYAML(n *yaml.Node) error {
	*e = composeEnv{}
	var m map[string]any
	isList, err := composeListOrMap(n, func(kv string) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			(*e)[k] = nil
			return
		}
		(*e)[k] = &v
	}, &m)
	if isList || err != nil {
		return err
	}
	for k, v := range m {
		if v == nil {
			(*e)[k] = nil
			continue
		}
		s := fmt.Sprint(v)
		(*e)[k] = &s
	}
	return nil
}

// composeDepends maps each dependency to its condition (the list form means
// service_started).
type composeDepends map[string]string

func (d *composeDepends) UnmarshalYAML(n *yaml.Node) error {
	*d = composeDepends{}
	var m map[string]struct {
		Condition string `yaml:"condition"`
		Restart   bool   `yaml:"restart"`
		Required  *bool  `yaml:"required"`
	}
	isList, err := composeListOrMap(n, func(s string) { (*d)[s] = "service_started" }, &m)
	if isList || err != nil {
		return err
	}
	for k, v := range m {
		(*d)[k] = v.Condition
		if v.Condition == "" {
			(*d)[k] = "service_started"
		}
	}
	return nil
}

// composeInterpolate applies compose's variable substitution as on a host with none
// of the variables set: ${VAR:-default} and ${VAR-default} take the default,
// $$ is a dollar. A variable without a default is an error, because the
// stack should start from a clean checkout without an .env file.
func composeInterpolate(text string) (string, error) {
	re := regexp.MustCompile(`\$(\$|\{([A-Za-z_][A-Za-z0-9_]*)(:?[-?+])?([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))`)
	var errs []string
	out := re.ReplaceAllStringFunc(text, func(m string) string {
		sub := re.FindStringSubmatch(m)
		switch {
		case sub[1] == "$":
			return "$"
		case sub[5] != "":
			errs = append(errs, fmt.Sprintf("$%s has no default", sub[5]))
			return ""
		}
		switch sub[3] {
		case ":-", "-":
			return sub[4]
		case ":+", "+":
			return ""
		case "":
			errs = append(errs, fmt.Sprintf("${%s} has no default (write ${%s:-value})", sub[2], sub[2]))
		default:
			errs = append(errs, fmt.Sprintf("${%s%s%s} requires the variable", sub[2], sub[3], sub[4]))
		}
		return ""
	})
	if len(errs) > 0 {
		return "", fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// composeStrictYAML decodes b into v; a key v has no field for is an error.
func composeStrictYAML(b []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	return dec.Decode(v)
}

// loadCompose reads compose.yaml, then each overlay given (as `docker compose
// -f compose.yaml -f <overlay>` would), merged by composeMerge.
func loadCompose(t *testing.T, overlays ...string) *composeFile {
	t.Helper()
	f := loadComposeFile(t, "compose.yaml")
	for _, o := range overlays {
		composeMerge(f, loadComposeFile(t, o))
	}
	return f
}

func loadComposeFile(t *testing.T, name string) *composeFile {
	t.Helper()
	path := filepath.Join(composeDir, name)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text, err := composeInterpolate(string(raw))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var f composeFile
	if err := composeStrictYAML([]byte(text), &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for k := range f.Other {
		if !strings.HasPrefix(k, "x-") {
			t.Errorf("%s: unknown top-level key %q (extensions start with x-)", name, k)
		}
	}
	if len(f.Services) == 0 {
		t.Fatalf("%s: no services", name)
	}
	return &f
}

// composeMerge applies an overlay file to base with Compose's merge rules
// (the compose specification's "Merge and override"): a service new in the
// overlay is added; for one in both, scalars the overlay sets replace,
// command, entrypoint and healthcheck.test are replaced whole, environment
// and depends_on are merged key by key, ports are added, volumes are added
// with one on the same container path replacing the base's; top-level
// volumes, secrets, configs and networks are merged by name.
func composeMerge(base, over *composeFile) {
	if over.Name != "" {
		base.Name = over.Name
	}
	mergeMap := func(dst *map[string]any, src map[string]any) {
		if *dst == nil && len(src) > 0 {
			*dst = map[string]any{}
		}
		maps.Copy(*dst, src)
	}
	mergeMap(&base.Volumes, over.Volumes)
	mergeMap(&base.Secrets, over.Secrets)
	mergeMap(&base.Configs, over.Configs)
	mergeMap(&base.Networks, over.Networks)
	mergeMap(&base.Other, over.Other)
	for name, o := range over.Services {
		b, ok := base.Services[name]
		if !ok {
			base.Services[name] = o
			continue
		}
		str := func(dst *string, src string) {
			if src != "" {
				*dst = src
			}
		}
		str(&b.Image, o.Image)
		str(&b.Hostname, o.Hostname)
		str(&b.ContainerName, o.ContainerName)
		str(&b.Restart, o.Restart)
		str(&b.StopGracePeriod, o.StopGracePeriod)
		str(&b.StopSignal, o.StopSignal)
		str(&b.User, o.User)
		str(&b.MemLimit, o.MemLimit)
		if o.Build != nil {
			b.Build = o.Build
		}
		if o.Entrypoint.shell != "" || o.Entrypoint.args != nil {
			b.Entrypoint = o.Entrypoint
		}
		if o.Command.shell != "" || o.Command.args != nil {
			b.Command = o.Command
		}
		if len(o.Environment) > 0 {
			env := composeEnv{}
			maps.Copy(env, b.Environment)
			maps.Copy(env, o.Environment)
			b.Environment = env
		}
		if len(o.DependsOn) > 0 {
			deps := composeDepends{}
			maps.Copy(deps, b.DependsOn)
			maps.Copy(deps, o.DependsOn)
			b.DependsOn = deps
		}
		for _, p := range o.Ports {
			if !slices.Contains(b.Ports, p) {
				b.Ports = append(b.Ports, p)
			}
		}
		vols := slices.Clone(b.Volumes)
		for _, v := range o.Volumes {
			target := composeMounts(composeService{Volumes: []string{v}})[0].target
			i := slices.IndexFunc(vols, func(bv string) bool {
				return composeMounts(composeService{Volumes: []string{bv}})[0].target == target
			})
			if i >= 0 {
				vols[i] = v
			} else {
				vols = append(vols, v)
			}
		}
		b.Volumes = vols
		if o.Healthcheck != nil {
			h := composeHealth{}
			if b.Healthcheck != nil {
				h = *b.Healthcheck
			}
			oh := o.Healthcheck
			if oh.Test.shell != "" || oh.Test.args != nil {
				h.Test = oh.Test
			}
			str(&h.Interval, oh.Interval)
			str(&h.Timeout, oh.Timeout)
			str(&h.StartPeriod, oh.StartPeriod)
			str(&h.StartInterval, oh.StartInterval)
			if oh.Retries != 0 {
				h.Retries = oh.Retries
			}
			h.Disable = h.Disable || oh.Disable
			b.Healthcheck = &h
		}
		// secrets and configs are sequences: added to the base's.
		for _, v := range []struct {
			dst *any
			src any
		}{{&b.Secrets, o.Secrets}, {&b.Configs, o.Configs}} {
			bl, ok1 := (*v.dst).([]any)
			ol, ok2 := v.src.([]any)
			if ok1 && ok2 {
				*v.dst = append(slices.Clone(bl), ol...)
			} else if v.src != nil {
				*v.dst = v.src
			}
		}
		for _, v := range []struct {
			dst *any
			src any
		}{
			{&b.Networks, o.Networks}, {&b.Networks, o.Networks},
			{&b.Labels, o.Labels}, {&b.Deploy, o.Deploy}, {&b.Tmpfs, o.Tmpfs}, {&b.Logging, o.Logging},
			{&b.Ulimits, o.Ulimits}, {&b.EnvFile, o.EnvFile},
		} {
			if v.src != nil {
				*v.dst = v.src // replaced whole: the stack sets none of them in both files
			}
		}
		if o.Init != nil {
			b.Init = o.Init
		}
		b.ReadOnly = b.ReadOnly || o.ReadOnly
		b.Expose = append(b.Expose, o.Expose...)
		b.Profiles = append(b.Profiles, o.Profiles...)
		b.CapAdd = append(b.CapAdd, o.CapAdd...)
		b.CapDrop = append(b.CapDrop, o.CapDrop...)
		b.SecurityOpt = append(b.SecurityOpt, o.SecurityOpt...)
		base.Services[name] = b
	}
}

// ---- the binary's flags -----------------------------------------------------

// composeHelpFlag is one line of a command's --help: its flag, the environment
// variable the help names, and the default it shows.
type composeHelpFlag struct{ env, def string }

var composeHelpLineRE = regexp.MustCompile(`^  --([a-z0-9][a-z0-9-]*)\s+(SLUICE_[A-Z0-9_]+)\s+(.*)$`)
var composeHelpDefaultRE = regexp.MustCompile(`\(default ([^()]*)\)$`)

// composeCommandFlags runs `sluice <cmd> --help` in process and reads its flags.
func composeCommandFlags(t *testing.T, cmd string) map[string]composeHelpFlag {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{cmd, "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("sluice %s --help: exit %d: %s", cmd, code, errOut.String())
	}
	flags := map[string]composeHelpFlag{}
	for _, line := range strings.Split(out.String(), "\n") {
		m := composeHelpLineRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		// The help names each flag's variable; it must be the one
		// internal/cli reads, or the help lies to operators.
		if want := cli.EnvName(cmd, m[1]); m[2] != want {
			t.Errorf("sluice %s --help names %s for --%s, internal/cli reads %s", cmd, m[2], m[1], want)
		}
		f := composeHelpFlag{env: m[2]}
		if d := composeHelpDefaultRE.FindStringSubmatch(strings.TrimSpace(m[3])); d != nil {
			f.def = d[1]
		}
		flags[m[1]] = f
	}
	if len(flags) == 0 {
		t.Fatalf("sluice %s --help lists no flags:\n%s", cmd, out.String())
	}
	return flags
}

// composeParseFlags runs the command's flag parsing on args and stops at --help, so
// nothing starts: exit 0 means every value parsed. The context is cancelled
// as well, in case an argument ever swallowed the --help.
func composeParseFlags(cmd string, args ...string) (ok bool, msg string) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, append(append([]string{cmd}, args...), "--help"), &out, &errOut)
	if code == 0 {
		return true, ""
	}
	// The flag package prints its complaint first, then the usage.
	msg = strings.TrimSpace(errOut.String())
	if first, _, _ := strings.Cut(out.String(), "\n"); !strings.HasPrefix(first, "Usage:") {
		msg = strings.TrimSpace(first + " " + msg)
	}
	return false, msg
}

// composePart is a sluice service with its flags resolved as the binary
// resolves them: the command line, then SLUICE_<PART>_<FLAG>, then
// SLUICE_<FLAG>, then the default.
type composePart struct {
	service string
	svc     composeService
	cmd     string
	flags   map[string]composeHelpFlag
	given   map[string]string // from the command line
	env     map[string]string // from the environment
	envVar  map[string]string // which variable gave env[flag]
}

func (p *composePart) has(flag string) bool { _, ok := p.flags[flag]; return ok }

func (p *composePart) value(flag string) string {
	if v, ok := p.given[flag]; ok {
		return v
	}
	if v, ok := p.env[flag]; ok {
		return v
	}
	return p.flags[flag].def
}

// where names where a flag's value comes from, for messages.
func (p *composePart) where(flag string) string {
	if _, ok := p.given[flag]; ok {
		return fmt.Sprintf("service %s: --%s", p.service, flag)
	}
	if v, ok := p.envVar[flag]; ok {
		return fmt.Sprintf("service %s: %s (--%s)", p.service, v, flag)
	}
	return fmt.Sprintf("service %s: --%s's default", p.service, flag)
}

// composeIsSluice reports whether a service runs the sluice image: it is built
// from the repository (its Dockerfile, not one written inline), or is the
// image those builds are tagged with.
func composeIsSluice(svc composeService, sluiceImage string) bool {
	return composeBuildsSluice(svc) || (sluiceImage != "" && svc.Image == sluiceImage)
}

// composeBuildsSluice: the service builds an image from the repository root.
func composeBuildsSluice(svc composeService) bool {
	return svc.Build != nil && svc.Build.DockerfileInline == "" && composeSameFile(filepath.Join(composeDir, svc.Build.Context), composeRoot)
}

// composeResolve checks each sluice service's command and environment against
// its command's --help and returns them resolved.
func composeResolve(t *testing.T, f *composeFile) map[string]*composePart {
	known := map[string]bool{}
	for _, c := range commands() {
		known[c.name] = true
	}
	// Go's runtime and the HTTP client read these; sluice reads only SLUICE_*.
	runtimeEnv := []string{"GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GODEBUG", "GOTRACEBACK", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"}

	sluiceImage := ""
	for _, svc := range f.Services {
		if composeBuildsSluice(svc) && svc.Image != "" {
			sluiceImage = svc.Image
		}
	}
	helps := map[string]map[string]composeHelpFlag{}
	parts := map[string]*composePart{}
	for _, name := range slices.Sorted(maps.Keys(f.Services)) {
		svc := f.Services[name]
		if !composeIsSluice(svc, sluiceImage) {
			continue
		}
		if svc.Entrypoint.shell != "" || len(svc.Entrypoint.args) > 0 {
			t.Errorf("service %s: sets an entrypoint; the image's is /sluice and the command names the part", name)
		}
		if svc.Command.shell != "" {
			t.Errorf("service %s: command is a string; write it as a list, [\"<part>\", \"--flag=value\", ...]", name)
			continue
		}
		if len(svc.Command.args) == 0 {
			t.Errorf("service %s: no command: it would only print the usage", name)
			continue
		}
		cmd := svc.Command.args[0]
		if !known[cmd] {
			t.Errorf("service %s: %q is not a sluice command", name, cmd)
			continue
		}
		if helps[cmd] == nil {
			helps[cmd] = composeCommandFlags(t, cmd)
		}
		p := &composePart{service: name, svc: svc, cmd: cmd, flags: helps[cmd],
			given: map[string]string{}, env: map[string]string{}, envVar: map[string]string{}}
		parts[name] = p

		for _, arg := range svc.Command.args[1:] {
			// Each argument stands alone (--name=value, or --name for a
			// switch), so it parses alone below and no value can be
			// taken for a flag.
			if !strings.HasPrefix(arg, "--") {
				t.Errorf("service %s: command argument %q is not a --flag (write flags as --name=value)", name, arg)
				continue
			}
			flagName, val, hasVal := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
			if !p.has(flagName) {
				t.Errorf("service %s: --%s is not a flag of `sluice %s` (see sluice %s --help)", name, flagName, cmd, cmd)
				continue
			}
			if _, dup := p.given[flagName]; dup {
				t.Errorf("service %s: --%s is given twice", name, flagName)
			}
			if !hasVal {
				val = "true"
			}
			p.given[flagName] = val
			if ok, msg := composeParseFlags(cmd, arg); !ok {
				t.Errorf("service %s: %s does not parse: %s", name, arg, msg)
			}
		}

		// Which flag reads each variable, exactly as cli.Parse looks them
		// up: the part's own variable first, then the shared one.
		used := map[string]bool{}
		shadowed := map[string]string{} // shared variable -> the part's one that wins
		for _, flagName := range slices.Sorted(maps.Keys(p.flags)) {
			own, shared := cli.EnvName(cmd, flagName), cli.SharedEnvName(flagName)
			v := own
			val, ok := svc.Environment[own]
			if ok {
				if _, both := svc.Environment[shared]; both {
					shadowed[shared] = own
				}
			} else if val, ok = svc.Environment[shared]; ok {
				v = shared
			} else {
				continue
			}
			used[v] = true
			if val == nil {
				t.Errorf("service %s: %s is passed through from the host; give it a value (or ${VAR:-default})", name, v)
				continue
			}
			if _, onCmd := p.given[flagName]; onCmd {
				t.Errorf("service %s: %s and --%s both set the flag; the command line wins, so the variable is dead", name, v, flagName)
			}
			if ok, msg := composeParseFlags(cmd, "--"+flagName+"="+*val); !ok {
				t.Errorf("service %s: %s=%q does not parse as --%s: %s", name, v, *val, flagName, msg)
			}
			p.env[flagName], p.envVar[flagName] = *val, v
		}
		for _, v := range slices.Sorted(maps.Keys(svc.Environment)) {
			switch {
			case used[v]:
			case shadowed[v] != "":
				t.Errorf("service %s: %s is shadowed by %s, so it does nothing here", name, v, shadowed[v])
			case strings.HasPrefix(v, "SLUICE_"):
				t.Errorf("service %s: %s names no flag of `sluice %s` (sluice ignores it): want SLUICE_%s_<FLAG> or SLUICE_<FLAG> of a flag in sluice %s --help",
					name, v, cmd, strings.ToUpper(cmd), cmd)
			case !slices.Contains(runtimeEnv, v):
				t.Errorf("service %s: environment %s is read by neither sluice nor Go's runtime", name, v)
			}
		}
	}
	return parts
}

// ---- addresses and ports ----------------------------------------------------

// listenPort is the port of a part's --listen, which must be reachable from
// the other containers.
func (p *composePart) listenPort(t *testing.T) string {
	host, port, err := net.SplitHostPort(p.value("listen"))
	if err != nil {
		t.Errorf("%s: %q: %v", p.where("listen"), p.value("listen"), err)
		return ""
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("%s: %q listens on %s only; other containers and Prometheus cannot reach it", p.where("listen"), p.value("listen"), host)
	}
	return port
}

// composeServicePorts is what a service listens on inside the compose network.
func composeServicePorts(t *testing.T, f *composeFile, parts map[string]*composePart, name string) []string {
	if p, ok := parts[name]; ok {
		return []string{p.listenPort(t)}
	}
	svc := f.Services[name]
	arg := func(flag, def string) string {
		for i, a := range svc.Command.args {
			if a == flag && i+1 < len(svc.Command.args) {
				return svc.Command.args[i+1]
			}
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				return v
			}
		}
		return def
	}
	image, _, _ := strings.Cut(svc.Image, ":")
	switch image {
	case "redis", "valkey/valkey":
		var ports []string
		if p := arg("--port", "6379"); p != "0" {
			ports = append(ports, p)
		}
		if p := arg("--tls-port", "0"); p != "0" {
			ports = append(ports, p)
		}
		return ports
	case "hashicorp/consul":
		return []string{arg("-http-port", "8500")}
	case "prom/prometheus":
		_, port, _ := net.SplitHostPort(arg("--web.listen-address", ":9090"))
		return []string{port}
	case "grafana/grafana", "grafana/grafana-oss":
		if v := svc.Environment["GF_SERVER_HTTP_PORT"]; v != nil {
			return []string{*v}
		}
		return []string{"3000"}
	case "apache/kafka", "apache/kafka-native":
		var ports []string
		for _, l := range composeKafkaAdvertised(svc) {
			if host, port, _ := net.SplitHostPort(l); host == name {
				ports = append(ports, port)
			}
		}
		return ports
	}
	return nil
}

// composeKafkaAdvertised is a Kafka service's advertised host:port addresses.
func composeKafkaAdvertised(svc composeService) []string {
	v := svc.Environment["KAFKA_ADVERTISED_LISTENERS"]
	if v == nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(*v, ",") {
		if _, hp, ok := strings.Cut(strings.TrimSpace(l), "://"); ok {
			out = append(out, hp)
		}
	}
	return out
}

// composeDependsClosure is every service that name comes up after, transitively.
func composeDependsClosure(f *composeFile, name string) map[string]bool {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(s string) {
		for dep := range f.Services[s].DependsOn {
			if !seen[dep] {
				seen[dep] = true
				walk(dep)
			}
		}
	}
	walk(name)
	return seen
}

// composeCheckDial checks an address a part dials (host:port): the host is a
// service that comes up before the part, listening on that port.
func composeCheckDial(t *testing.T, f *composeFile, parts map[string]*composePart, p *composePart, flag, hostport string) {
	t.Helper()
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Errorf("%s: %q: %v", p.where(flag), hostport, err)
		return
	}
	if _, ok := f.Services[host]; !ok {
		t.Errorf("%s: %q: no service %s in compose.yaml (a container reaches another by its service name)", p.where(flag), hostport, host)
		return
	}
	if ports := composeServicePorts(t, f, parts, host); !slices.Contains(ports, port) {
		t.Errorf("%s: %q: service %s listens on %v, not %s", p.where(flag), hostport, host, ports, port)
	}
	if !composeDependsClosure(f, p.service)[host] {
		t.Errorf("%s: %q: service %s does not depend on %s, so it may start before it", p.where(flag), hostport, p.service, host)
	}
}

// composePortMapping splits a short-syntax port mapping ("127.0.0.1:8080:8080",
// "8080:8080", "8080", with an optional /tcp) into its host side ("" for a
// random host port) and its container port.
func composePortMapping(mapping string) (hostSide, containerPort string) {
	mapping, _, _ = strings.Cut(mapping, "/")
	i := strings.LastIndex(mapping, ":")
	return mapping[:max(0, i)], mapping[i+1:]
}

// composeMount is a short-syntax volume: a bind mount (source a path, relative to
// the compose file) or a named volume.
type composeMount struct{ source, target string }

func (m composeMount) bind() bool {
	return strings.HasPrefix(m.source, ".") || strings.HasPrefix(m.source, "/")
}

func composeMounts(svc composeService) []composeMount {
	var out []composeMount
	for _, v := range svc.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) == 1 {
			out = append(out, composeMount{target: parts[0]}) // anonymous volume
			continue
		}
		out = append(out, composeMount{source: parts[0], target: parts[1]})
	}
	return out
}

// composeHostPath is the file on the host mounted at a container path: a bind
// mount of it or of a directory holding it ("" when none).
func composeHostPath(svc composeService, containerPath string) string {
	for _, m := range composeMounts(svc) {
		if !m.bind() {
			continue
		}
		if containerPath == m.target {
			return filepath.Join(composeDir, m.source)
		}
		if rel, ok := strings.CutPrefix(containerPath, strings.TrimSuffix(m.target, "/")+"/"); ok {
			return filepath.Join(composeDir, m.source, rel)
		}
	}
	return ""
}

// composeMountOf is the mount (bind or named volume) that holds a container
// path in svc, the deepest when several do (nil when none does).
func composeMountOf(svc composeService, containerPath string) *composeMount {
	var best *composeMount
	for _, m := range composeMounts(svc) {
		if m.source == "" {
			continue // an anonymous volume holds nothing made before the start
		}
		if containerPath == m.target || strings.HasPrefix(containerPath, strings.TrimSuffix(m.target, "/")+"/") {
			if best == nil || len(m.target) > len(best.target) {
				best = &m
			}
		}
	}
	return best
}

// servesTLS reports whether a part serves its --listen over HTTPS.
func (p *composePart) servesTLS() bool {
	return p.has("tls-cert-file") && p.value("tls-cert-file") != ""
}

func (p *composePart) scheme() string {
	if p.servesTLS() {
		return "https"
	}
	return "http"
}

func composeSameFile(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == bb
}

// ---- the tests --------------------------------------------------------------

// TestComposeServices checks the compose stack's services against the
// binary and against each other: compose.yaml alone, and merged with the
// secured overlay compose.secure.yaml (TestComposeSecure checks what only
// the overlay promises).
func TestComposeServices(t *testing.T) {
	t.Run("compose.yaml", func(t *testing.T) { composeCheckServices(t, loadCompose(t)) })
	t.Run("compose.secure.yaml", func(t *testing.T) { composeCheckServices(t, loadCompose(t, "compose.secure.yaml")) })
}

func composeCheckServices(t *testing.T, f *composeFile) {
	parts := composeResolve(t, f)
	if t.Failed() {
		t.FailNow() // the checks below read flags the ones above rejected
	}

	byCmd := map[string][]*composePart{}
	for _, name := range slices.Sorted(maps.Keys(parts)) {
		byCmd[parts[name].cmd] = append(byCmd[parts[name].cmd], parts[name])
	}
	// The stack: every part, with a standby relay on the lock.
	for cmd, want := range map[string]int{"gate": 1, "relay": 2, "worker": 1, "coordinator": 1} {
		if len(byCmd[cmd]) < want {
			t.Errorf("compose.yaml runs %d sluice %s services, want at least %d", len(byCmd[cmd]), cmd, want)
		}
	}

	// Every service: dependencies exist and their conditions can be met.
	hostPorts := map[string][]struct{ ip, service string }{} // published host port -> who
	for _, name := range slices.Sorted(maps.Keys(f.Services)) {
		svc := f.Services[name]
		for dep, cond := range svc.DependsOn {
			d, ok := f.Services[dep]
			switch {
			case !ok:
				t.Errorf("service %s depends on %s, which is not a service", name, dep)
			case cond == "service_healthy" && (d.Healthcheck == nil || d.Healthcheck.Disable):
				t.Errorf("service %s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			case cond == "service_completed_successfully" && d.Restart != "no" && d.Restart != "on-failure" && d.Restart != "":
				t.Errorf("service %s waits for %s to complete, but %s restarts %q", name, dep, dep, d.Restart)
			case cond != "service_started" && cond != "service_healthy" && cond != "service_completed_successfully":
				t.Errorf("service %s: depends_on %s: condition %q is not a compose condition", name, dep, cond)
			}
		}
		// Pinned: a floating tag changes the stack under its users. An
		// image built inline is as pinned as its FROM.
		pinned := func(what, image string) {
			_, tag, ok := strings.Cut(image, ":")
			if !ok || tag == "latest" || !composeDigitRE.MatchString(tag) {
				t.Errorf("service %s: %s %q is not pinned to a version", name, what, image)
			}
		}
		switch {
		case svc.Build == nil:
			pinned("image", svc.Image)
		case svc.Build.DockerfileInline != "":
			for _, line := range strings.Split(svc.Build.DockerfileInline, "\n") {
				if fields := strings.Fields(line); len(fields) >= 2 && strings.EqualFold(fields[0], "FROM") {
					pinned("dockerfile_inline FROM", fields[1])
				}
			}
		}
		for _, m := range composeMounts(svc) {
			switch {
			case m.bind():
				if _, err := os.Stat(filepath.Join(composeDir, m.source)); err != nil {
					t.Errorf("service %s: mounts %s, which does not exist: %v", name, m.source, err)
				}
			case m.source != "":
				if _, ok := f.Volumes[m.source]; !ok {
					t.Errorf("service %s: volume %s is not declared under volumes:", name, m.source)
				}
			}
		}
		// Two services on one host port: `up` fails on the second.
		for _, mapping := range svc.Ports {
			hostSide, _ := composePortMapping(mapping)
			if hostSide == "" {
				continue // a random host port
			}
			ip, port, ok := strings.Cut(hostSide, ":")
			if !ok {
				ip, port = "0.0.0.0", hostSide
			}
			// 0.0.0.0 takes the port on every address.
			for _, other := range hostPorts[port] {
				if other.ip == ip || other.ip == "0.0.0.0" || ip == "0.0.0.0" {
					t.Errorf("service %s: publishes %s:%s, as service %s publishes %s:%s", name, ip, port, other.service, other.ip, port)
				}
			}
			hostPorts[port] = append(hostPorts[port], struct{ ip, service string }{ip, name})
		}
		if svc.StopGracePeriod != "" {
			if _, err := time.ParseDuration(svc.StopGracePeriod); err != nil {
				t.Errorf("service %s: stop_grace_period %q: %v", name, svc.StopGracePeriod, err)
			}
		}
	}

	for _, name := range slices.Sorted(maps.Keys(parts)) {
		p := parts[name]
		svc := p.svc
		port := p.listenPort(t)

		if b := svc.Build; b == nil || !composeSameFile(filepath.Join(composeDir, b.Context), composeRoot) {
			t.Errorf("service %s: build.context must be the repository root (../..), to build ./cmd/sluice", name)
		} else if df := cmp.Or(b.Dockerfile, "Dockerfile"); !composeSameFile(filepath.Join(composeDir, b.Context, df), filepath.Join(composeRoot, "Dockerfile")) {
			t.Errorf("service %s: build.dockerfile %q is not the repository's Dockerfile", name, b.Dockerfile)
		}
		if svc.Restart != "unless-stopped" && svc.Restart != "always" && svc.Restart != "on-failure" {
			t.Errorf("service %s: restart %q: a part that exits (Redis or Consul away at start) must come back", name, svc.Restart)
		}
		for _, mapping := range svc.Ports {
			if _, cp := composePortMapping(mapping); cp != port {
				t.Errorf("service %s: publishes %q, but %s is %q: container port %s serves nothing", name, mapping, p.where("listen"), p.value("listen"), cp)
			}
		}

		// Healthcheck: the probe GETs the part's own /readyz, over https
		// trusting the stack's CA when the part serves TLS.
		scheme, probeWant := "http", `["CMD", "/probe", "http://127.0.0.1:%s/readyz"]`
		if p.servesTLS() {
			scheme, probeWant = "https", `["CMD", "/probe", "--ca-file=<CA>", "https://127.0.0.1:%s/readyz"]`
		}
		h := svc.Healthcheck
		var probeArgs []string
		if h != nil && len(h.Test.args) >= 3 {
			probeArgs = h.Test.args[2:]
		}
		caFile := ""
		if len(probeArgs) == 2 {
			caFile, _ = strings.CutPrefix(probeArgs[0], "--ca-file=")
		}
		switch {
		case h == nil || h.Disable:
			t.Errorf("service %s: no healthcheck (want "+probeWant+")", name, port)
		case h.Test.args[0] != "CMD" || h.Test.args[1] != "/probe" || len(probeArgs) != 1 && caFile == "":
			t.Errorf("service %s: healthcheck %q: the image has no shell; want "+probeWant, name, h.Test, port)
		default:
			u, err := url.Parse(probeArgs[len(probeArgs)-1])
			if err != nil || u.Scheme != scheme || u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost" || u.Port() != port || u.Path != "/readyz" {
				t.Errorf("service %s: healthcheck GETs %s, want %s://127.0.0.1:%s/readyz (%s is %q)", name, probeArgs[len(probeArgs)-1], scheme, port, p.where("listen"), p.value("listen"))
			}
			if scheme == "https" && caFile == "" {
				t.Errorf("service %s: healthcheck %q: the part's certificate is from the stack's CA; want --ca-file=<the CA> before the URL", name, h.Test)
			}
			if caFile != "" && composeMountOf(svc, caFile) == nil {
				t.Errorf("service %s: healthcheck --ca-file=%s: nothing is mounted there", name, caFile)
			}
			for what, d := range map[string]string{"interval": h.Interval, "timeout": h.Timeout, "start_period": h.StartPeriod} {
				if d == "" {
					continue
				}
				if _, err := time.ParseDuration(d); err != nil {
					t.Errorf("service %s: healthcheck %s %q: %v", name, what, d, err)
				}
			}
			// The probe gives up after 2 s and says why; Docker's timeout
			// must leave it that time.
			if d, err := time.ParseDuration(h.Timeout); err == nil && d <= 2*time.Second {
				t.Errorf("service %s: healthcheck timeout %s: want more than the probe's own 2s", name, h.Timeout)
			}
		}

		// Graceful stop: Docker's SIGKILL must come after the part's drain.
		grace, err := time.ParseDuration(svc.StopGracePeriod)
		if err != nil {
			t.Errorf("service %s: stop_grace_period %q: set one (Docker's default is 10s)", name, svc.StopGracePeriod)
		} else if p.has("drain-timeout") {
			if drain, err := time.ParseDuration(p.value("drain-timeout")); err == nil && grace <= drain {
				t.Errorf("service %s: stop_grace_period %s is not longer than %s %s: Docker kills it mid-drain", name, grace, p.where("drain-timeout"), drain)
			}
		}

		// What the part dials.
		for _, flag := range []string{"redis-addr", "consul-addr"} {
			if p.has(flag) && p.value(flag) != "" {
				composeCheckDial(t, f, parts, p, flag, p.value(flag))
			}
		}
		if p.has("redis-partition-addrs") && p.value("redis-partition-addrs") != "" {
			for _, pa := range strings.Split(p.value("redis-partition-addrs"), ",") {
				_, addr, _ := strings.Cut(pa, "=")
				composeCheckDial(t, f, parts, p, "redis-partition-addrs", strings.TrimSpace(addr))
			}
		}
		if p.has("kafka-brokers") {
			for _, b := range composeSplit(p.value("kafka-brokers")) {
				composeCheckDial(t, f, parts, p, "kafka-brokers", b)
			}
		}
		// The gates' /metrics for the admin API's stats: each URL a
		// gate's --listen.
		if p.has("gate-metrics") {
			for _, raw := range composeSplit(p.value("gate-metrics")) {
				u, err := url.Parse(raw)
				if err != nil || u.Host == "" || u.Path != "/metrics" {
					t.Errorf("%s: %q: want http(s)://<gate service>:<port>/metrics", p.where("gate-metrics"), raw)
					continue
				}
				if g, ok := parts[u.Hostname()]; !ok || g.cmd != "gate" {
					t.Errorf("%s: %q: %s is not a gate service", p.where("gate-metrics"), raw, u.Hostname())
					continue
				}
				composeCheckDial(t, f, parts, p, "gate-metrics", u.Host)
			}
		}
		if p.has("canary-topics") && p.value("canary-topics") != "" {
			u, err := url.Parse(p.value("canary-gate"))
			if err != nil || u.Host == "" {
				t.Errorf("%s: %q is not a URL", p.where("canary-gate"), p.value("canary-gate"))
			} else {
				composeCheckDial(t, f, parts, p, "canary-gate", u.Host)
			}
		}
		// What the parts check only once they start (relay.New,
		// coordinator/canary.go), which --help parsing cannot reach.
		if p.has("memory-high") && p.has("memory-low") {
			hi, err1 := strconv.ParseFloat(p.value("memory-high"), 64)
			lo, err2 := strconv.ParseFloat(p.value("memory-low"), 64)
			if err1 != nil || err2 != nil || !(0 < lo && lo < hi && hi <= 1) {
				t.Errorf("%s %q and %s %q: the relay wants 0 < low < high <= 1 and refuses to start", p.where("memory-low"), p.value("memory-low"), p.where("memory-high"), p.value("memory-high"))
			}
		}
		if p.has("canary-interval") && p.value("canary-topics") != "" {
			if d, err := time.ParseDuration(p.value("canary-interval")); err == nil && d < time.Second {
				t.Errorf("%s %s: the canary monitor wants 1s or more and refuses to start", p.where("canary-interval"), d)
			}
		}
		// A worker with no Consul runs no execution rate limits at all:
		// limits set in Consul would be silently ignored.
		if p.cmd == "worker" && p.value("consul-addr") == "" {
			t.Errorf("service %s: worker without --consul-addr ignores the rate limits in Consul", name)
		}
	}

	composeCheckAgreement(t, parts, byCmd)
	composeCheckTopics(t, f, byCmd)
	composeCheckStores(t, f)
	composeCheckPrometheus(t, f, parts)
	composeCheckGrafana(t, f, parts)
}

// composeCheckAgreement: the parts agree on what they share.
func composeCheckAgreement(t *testing.T, parts map[string]*composePart, byCmd map[string][]*composePart) {
	// The stage and the layout name Redis keys and Consul paths: a part
	// that differs reads and writes keys nobody else sees.
	for _, flag := range []string{"stage", "redis-partitions", "redis-addr", "redis-partition-addrs"} {
		var first *composePart
		for _, name := range slices.Sorted(maps.Keys(parts)) {
			p := parts[name]
			if !p.has(flag) {
				continue
			}
			if first == nil {
				first = p
				continue
			}
			if p.value(flag) != first.value(flag) {
				t.Errorf("%s is %q but %s is %q: every part must agree", p.where(flag), p.value(flag), first.where(flag), first.value(flag))
			}
		}
	}
	// Relays of a topic contend for one lock: same Consul, same topics.
	relays := byCmd["relay"]
	for _, r := range relays[min(1, len(relays)):] {
		for _, flag := range []string{"consul-addr", "topics", "consumer-group"} {
			if r.value(flag) != relays[0].value(flag) {
				t.Errorf("%s is %q but %s is %q: the relays would not share the lock and offsets", r.where(flag), r.value(flag), relays[0].where(flag), relays[0].value(flag))
			}
		}
	}
	// The admin API reads the relays' lag under their consumer group; its
	// gate counts need every gate.
	for _, c := range byCmd["coordinator"] {
		if c.has("consumer-group") && len(relays) > 0 && c.value("consumer-group") != relays[0].value("consumer-group") {
			t.Errorf("%s is %q but %s is %q: the admin API would read another group's lag", c.where("consumer-group"), c.value("consumer-group"), relays[0].where("consumer-group"), relays[0].value("consumer-group"))
		}
		if !c.has("gate-metrics") {
			continue
		}
		for _, g := range byCmd["gate"] {
			want := g.scheme() + "://" + net.JoinHostPort(g.service, g.listenPort(t)) + "/metrics"
			if !slices.Contains(composeSplit(c.value("gate-metrics")), want) {
				t.Errorf("%s: %q lacks %s: the admin API's funnel would miss that gate's counts", c.where("gate-metrics"), c.value("gate-metrics"), want)
			}
		}
	}
	// The scaler's floor is the workers' starting size (coordinator --help:
	// "set it to the workers' --workers").
	for _, c := range byCmd["coordinator"] {
		for _, w := range byCmd["worker"] {
			if c.value("scale-base") != w.value("workers") {
				t.Errorf("%s is %s but %s is %s: the scaler would resize the workers at once", c.where("scale-base"), c.value("scale-base"), w.where("workers"), w.value("workers"))
			}
		}
	}
}

// composeCreatedTopics are the topics the stack's init service creates with
// kafka-topics.sh --create.
func composeCreatedTopics(f *composeFile) (map[string]bool, string) {
	re := regexp.MustCompile(`kafka-topics\.sh[^\n]*--create[^\n]*--topic[ =]"?([A-Za-z0-9._-]+)`)
	for _, name := range slices.Sorted(maps.Keys(f.Services)) {
		svc := f.Services[name]
		script := svc.Entrypoint.String() + " " + svc.Command.String()
		if ms := re.FindAllStringSubmatch(script, -1); ms != nil {
			topics := map[string]bool{}
			for _, m := range ms {
				topics[m[1]] = true
			}
			return topics, name
		}
	}
	return nil, ""
}

func composeSplit(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// composeCheckTopics: every topic a part uses exists, with what the relay
// needs beside it, and the canaries can get through the gate.
func composeCheckTopics(t *testing.T, f *composeFile, byCmd map[string][]*composePart) {
	topics, initSvc := composeCreatedTopics(f)
	if topics == nil {
		t.Errorf("no service creates topics with kafka-topics.sh --create: the parts never create them")
		return
	}
	// The relays, gate and canaries run after the topics exist.
	for _, cmd := range []string{"gate", "relay"} {
		for _, p := range byCmd[cmd] {
			if f.Services[p.service].DependsOn[initSvc] != "service_completed_successfully" {
				t.Errorf("service %s: does not wait for %s to complete (condition service_completed_successfully): it may start before its topics exist", p.service, initSvc)
			}
		}
	}
	need := func(p *composePart, flag, topic string) {
		if !topics[topic] {
			t.Errorf("%s names topic %s, which %s does not create", p.where(flag), topic, initSvc)
		}
	}
	for _, r := range byCmd["relay"] {
		for _, topic := range composeSplit(r.value("topics")) {
			need(r, "topics", topic)
			need(r, "topics", topic+".dlq") // the relay refuses to start without it
		}
	}
	for _, g := range byCmd["gate"] {
		for _, topic := range composeSplit(g.value("topics")) {
			need(g, "topics", topic)
		}
	}

	// Gate tokens: "<token> <scope>[,<scope>]" separated by ';'.
	gateScopes := map[string][]string{}
	for _, g := range byCmd["gate"] {
		if g.value("tokens") == "" && g.value("tokens-file") == "" && g.value("allow-no-auth") != "true" {
			t.Errorf("service %s: the gate has no --tokens or --tokens-file and refuses to start without them", g.service)
		}
		if g.value("allow-no-auth") == "true" {
			t.Errorf("%s: a compose stack publishes the gate; give it tokens", g.where("allow-no-auth"))
		}
		for _, line := range strings.Split(g.value("tokens"), ";") {
			fields := strings.Fields(line)
			if len(fields) == 0 {
				continue
			}
			if len(fields) != 2 || len(fields[0]) < 16 {
				t.Errorf("%s: entry %q: want \"<token of 16+ characters> <topics>\"", g.where("tokens"), line)
				continue
			}
			gateScopes[fields[0]] = composeSplit(fields[1])
		}
	}
	// The admin API (docs/admin.md): without tokens it answers 403 to
	// everyone, and --admin-insecure would give anyone who reaches the port
	// admin rights. Entries are "<token> <role>", role read or admin.
	for _, c := range byCmd["coordinator"] {
		if !c.has("admin-tokens") {
			continue // a binary before the admin API
		}
		if c.value("admin-insecure") == "true" {
			t.Errorf("%s: the API would take anyone as admin; give it tokens", c.where("admin-insecure"))
		}
		if c.value("admin-tokens") == "" && c.value("admin-tokens-file") == "" {
			t.Errorf("service %s: no --admin-tokens or --admin-tokens-file: the admin API and the dashboard answer 403", c.service)
		}
		roles := map[string]bool{}
		for _, entry := range strings.Split(c.value("admin-tokens"), ";") {
			fields := strings.Fields(entry)
			switch {
			case len(fields) == 0:
			case len(fields) != 2 || len(fields[0]) < 16 || fields[1] != "read" && fields[1] != "admin":
				t.Errorf("%s: entry %q: want \"<token of 16+ characters> read|admin\"", c.where("admin-tokens"), entry)
			default:
				roles[fields[1]] = true
			}
		}
		if c.value("admin-tokens") != "" && !roles["admin"] {
			t.Errorf("%s: no admin token: nothing can replay, pause or edit", c.where("admin-tokens"))
		}
	}

	for _, cmd := range []string{"coordinator", "canary"} {
		for _, c := range byCmd[cmd] {
			canaryTopics := composeSplit(c.value("canary-topics"))
			if len(canaryTopics) == 0 {
				continue
			}
			scopes, ok := gateScopes[c.value("canary-token")]
			if !ok && len(gateScopes) > 0 {
				t.Errorf("%s: not one of the gate's --tokens: the canaries get 401", c.where("canary-token"))
				continue
			}
			if ok && !slices.Contains(scopes, "+canary") {
				t.Errorf("%s: the gate's token has scope %v without +canary: the canaries get 403", c.where("canary-token"), scopes)
			}
			for _, topic := range canaryTopics {
				need(c, "canary-topics", topic)
				if ok && !slices.Contains(scopes, topic) && !slices.Contains(scopes, "*") {
					t.Errorf("%s: the gate's token may not write %s", c.where("canary-token"), topic)
				}
				relayed := false
				for _, r := range byCmd["relay"] {
					relayed = relayed || slices.Contains(composeSplit(r.value("topics")), topic)
				}
				if !relayed {
					t.Errorf("%s: no relay relays %s, so its canaries always go stale", c.where("canary-topics"), topic)
				}
			}
		}
	}
}

// composeCheckStores: the settings sluice's guarantees rest on.
func composeCheckStores(t *testing.T, f *composeFile) {
	for _, name := range slices.Sorted(maps.Keys(f.Services)) {
		svc := f.Services[name]
		image, _, _ := strings.Cut(svc.Image, ":")
		switch image {
		case "redis":
			args := map[string]string{}
			for i := 0; i+1 < len(svc.Command.args); i++ {
				if strings.HasPrefix(svc.Command.args[i], "--") {
					args[svc.Command.args[i]] = svc.Command.args[i+1]
				}
			}
			for flag, want := range map[string]string{
				"--appendonly":       "yes",      // a restart keeps the queues
				"--appendfsync":      "everysec", // at most a second lost
				"--maxmemory-policy": "noeviction",
			} {
				if args[flag] != want {
					t.Errorf("service %s: %s %q, want %s", name, flag, args[flag], want)
				}
			}
			// The relay's memory guard works on a fraction of maxmemory; a
			// Redis without one cannot be guarded.
			if m := args["--maxmemory"]; m == "" || m == "0" {
				t.Errorf("service %s: no --maxmemory: the relay's memory guard cannot work", name)
			}
		case "apache/kafka", "apache/kafka-native":
			if svc.Environment["KAFKA_PROCESS_ROLES"] == nil && (len(svc.Entrypoint.args) > 0 || svc.Entrypoint.shell != "") {
				continue // the image run as a tool (kafka-init), not a broker
			}
			env := func(k string) string {
				if v := svc.Environment[k]; v != nil {
					return *v
				}
				return ""
			}
			if !strings.Contains(env("KAFKA_PROCESS_ROLES"), "controller") {
				t.Errorf("service %s: KAFKA_PROCESS_ROLES %q: want KRaft (a controller role, no ZooKeeper)", name, env("KAFKA_PROCESS_ROLES"))
			}
			if env("KAFKA_AUTO_CREATE_TOPICS_ENABLE") != "false" {
				t.Errorf("service %s: KAFKA_AUTO_CREATE_TOPICS_ENABLE must be false: topics are created by operators, never by requests", name)
			}
			if len(composeKafkaAdvertised(svc)) == 0 {
				t.Errorf("service %s: no KAFKA_ADVERTISED_LISTENERS", name)
			}
		}
	}
}

// composeServiceByImage is the service that runs one of images (any tag),
// the last by name when several do ("" when none does).
func composeServiceByImage(f *composeFile, images ...string) string {
	var name string
	for _, n := range slices.Sorted(maps.Keys(f.Services)) {
		if img, _, _ := strings.Cut(f.Services[n].Image, ":"); slices.Contains(images, img) {
			name = n
		}
	}
	return name
}

// composeCheckPrometheus: every part is scraped at its --listen, and the alert
// rules are the repository's.
func composeCheckPrometheus(t *testing.T, f *composeFile, parts map[string]*composePart) {
	name := composeServiceByImage(f, "prom/prometheus")
	if name == "" {
		t.Errorf("compose.yaml: no prom/prometheus service")
		return
	}
	svc := f.Services[name]
	configPath := "/etc/prometheus/prometheus.yml"
	for _, a := range svc.Command.args {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			configPath = v
		}
	}
	hostConfig := composeHostPath(svc, configPath)
	if hostConfig == "" {
		t.Errorf("service %s: nothing is mounted at its config %s", name, configPath)
		return
	}
	raw, err := os.ReadFile(hostConfig)
	if err != nil {
		t.Errorf("service %s: %v", name, err)
		return
	}
	var cfg struct {
		Global        map[string]any `yaml:"global"`
		RuleFiles     []string       `yaml:"rule_files"`
		Alerting      map[string]any `yaml:"alerting"`
		ScrapeConfigs []struct {
			JobName     string `yaml:"job_name"`
			MetricsPath string `yaml:"metrics_path"`
			Scheme      string `yaml:"scheme"`
			TLSConfig   struct {
				CAFile     string `yaml:"ca_file"`
				ServerName string `yaml:"server_name"`
			} `yaml:"tls_config"`
			StaticConfigs []struct {
				Targets []string          `yaml:"targets"`
				Labels  map[string]string `yaml:"labels"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := composeStrictYAML(raw, &cfg); err != nil {
		t.Errorf("%s: %v", hostConfig, err)
		return
	}
	alerts := filepath.Join(composeRoot, "deploy", "prometheus", "alerts.yml")
	loadsAlerts := false
	for _, rf := range cfg.RuleFiles {
		host := composeHostPath(svc, rf)
		if host == "" {
			t.Errorf("%s: rule file %s: nothing is mounted there in service %s", hostConfig, rf, name)
			continue
		}
		if _, err := os.Stat(host); err != nil {
			t.Errorf("%s: rule file %s: %v", hostConfig, rf, err)
		}
		loadsAlerts = loadsAlerts || composeSameFile(host, alerts)
	}
	if !loadsAlerts {
		t.Errorf("%s: rule_files do not load deploy/prometheus/alerts.yml", hostConfig)
	}

	targets := map[string]string{} // host:port -> job
	for _, sc := range cfg.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("%s: job %s scrapes %s; the parts serve /metrics", hostConfig, sc.JobName, sc.MetricsPath)
		}
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				targets[tg] = sc.JobName
				host, port, err := net.SplitHostPort(tg)
				if err != nil {
					t.Errorf("%s: job %s: target %q: %v", hostConfig, sc.JobName, tg, err)
					continue
				}
				if host == "localhost" || host == "127.0.0.1" {
					host = name // Prometheus itself
				}
				if _, ok := f.Services[host]; !ok {
					t.Errorf("%s: job %s: target %s is no service of compose.yaml", hostConfig, sc.JobName, tg)
					continue
				}
				if ports := composeServicePorts(t, f, parts, host); !slices.Contains(ports, port) {
					t.Errorf("%s: job %s: target %s, but service %s listens on %v", hostConfig, sc.JobName, tg, host, ports)
				}
				// A part serving HTTPS is scraped over https, trusting
				// the CA file mounted in Prometheus.
				if p, ok := parts[host]; ok && p.servesTLS() {
					if sc.Scheme != "https" {
						t.Errorf("%s: job %s: target %s serves HTTPS (%s): want scheme: https", hostConfig, sc.JobName, tg, p.where("tls-cert-file"))
					}
					if sc.TLSConfig.CAFile == "" || composeMountOf(svc, sc.TLSConfig.CAFile) == nil {
						t.Errorf("%s: job %s: tls_config.ca_file %q: want the stack's CA, mounted in service %s", hostConfig, sc.JobName, sc.TLSConfig.CAFile, name)
					}
				} else if ok && sc.Scheme == "https" {
					t.Errorf("%s: job %s: scheme https, but %s serves plain HTTP", hostConfig, sc.JobName, tg)
				}
			}
		}
	}
	for _, pn := range slices.Sorted(maps.Keys(parts)) {
		p := parts[pn]
		want := net.JoinHostPort(pn, p.listenPort(t))
		if _, ok := targets[want]; !ok {
			t.Errorf("%s: service %s (%s %q) is not scraped: want target %s", hostConfig, pn, p.where("listen"), p.value("listen"), want)
		}
	}
}

// composeCheckGrafana: the provisioned data source is the stack's Prometheus and
// the provisioned dashboard folder holds deploy/grafana/sluice.json.
func composeCheckGrafana(t *testing.T, f *composeFile, parts map[string]*composePart) {
	name := composeServiceByImage(f, "grafana/grafana", "grafana/grafana-oss")
	if name == "" {
		t.Errorf("compose.yaml: no grafana/grafana service")
		return
	}
	svc := f.Services[name]
	prov := "/etc/grafana/provisioning"
	if v := svc.Environment["GF_PATHS_PROVISIONING"]; v != nil {
		prov = *v
	}
	hostProv := composeHostPath(svc, prov)
	if hostProv == "" {
		t.Errorf("service %s: nothing is mounted at %s", name, prov)
		return
	}
	readAll := func(sub string) map[string][]byte {
		files, _ := filepath.Glob(filepath.Join(hostProv, sub, "*.y*ml"))
		if len(files) == 0 {
			t.Errorf("service %s: no provisioning file in %s", name, filepath.Join(hostProv, sub))
		}
		out := map[string][]byte{}
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Error(err)
			}
			out[file] = b
		}
		return out
	}
	strict := func(file string, b []byte, v any) bool {
		if err := composeStrictYAML(b, v); err != nil {
			t.Errorf("%s: %v", file, err)
			return false
		}
		return true
	}

	hasDefault := false
	for file, b := range readAll("datasources") {
		var ds struct {
			APIVersion  int `yaml:"apiVersion"`
			Datasources []struct {
				Name      string         `yaml:"name"`
				UID       string         `yaml:"uid"`
				Type      string         `yaml:"type"`
				Access    string         `yaml:"access"`
				URL       string         `yaml:"url"`
				IsDefault bool           `yaml:"isDefault"`
				Editable  bool           `yaml:"editable"`
				JSONData  map[string]any `yaml:"jsonData"`
			} `yaml:"datasources"`
		}
		if !strict(file, b, &ds) {
			continue
		}
		for _, d := range ds.Datasources {
			if d.Type != "prometheus" {
				continue
			}
			// The dashboard's datasource variable starts on the default.
			hasDefault = hasDefault || d.IsDefault
			u, err := url.Parse(d.URL)
			if err != nil || u.Port() == "" {
				t.Errorf("%s: data source %s: url %q: want http://<service>:<port>", file, d.Name, d.URL)
				continue
			}
			if _, ok := f.Services[u.Hostname()]; !ok {
				t.Errorf("%s: data source %s: %s is no service of compose.yaml", file, d.Name, u.Hostname())
			} else if ports := composeServicePorts(t, f, parts, u.Hostname()); !slices.Contains(ports, u.Port()) {
				t.Errorf("%s: data source %s: %s, but service %s listens on %v", file, d.Name, d.URL, u.Hostname(), ports)
			}
		}
	}
	if !hasDefault {
		t.Errorf("service %s: no default Prometheus data source: the dashboard's datasource variable starts empty", name)
	}

	dashboard := filepath.Join(composeRoot, "deploy", "grafana", "sluice.json")
	loaded := false
	for file, b := range readAll("dashboards") {
		var dp struct {
			APIVersion int `yaml:"apiVersion"`
			Providers  []struct {
				Name                  string `yaml:"name"`
				OrgID                 int    `yaml:"orgId"`
				Folder                string `yaml:"folder"`
				FolderUID             string `yaml:"folderUid"`
				Type                  string `yaml:"type"`
				DisableDeletion       bool   `yaml:"disableDeletion"`
				AllowUIUpdates        bool   `yaml:"allowUiUpdates"`
				UpdateIntervalSeconds int    `yaml:"updateIntervalSeconds"`
				Options               struct {
					Path                      string `yaml:"path"`
					FoldersFromFilesStructure bool   `yaml:"foldersFromFilesStructure"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		if !strict(file, b, &dp) {
			continue
		}
		for _, pr := range dp.Providers {
			host := composeHostPath(svc, filepath.ToSlash(filepath.Join(pr.Options.Path, "sluice.json")))
			if host == "" {
				t.Errorf("%s: provider %s reads %s, where service %s mounts nothing", file, pr.Name, pr.Options.Path, name)
				continue
			}
			loaded = loaded || composeSameFile(host, dashboard)
		}
	}
	if !loaded {
		t.Errorf("service %s: no dashboard provider reads deploy/grafana/sluice.json", name)
	}
	if v := svc.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; v != nil {
		if host := composeHostPath(svc, *v); host == "" || !composeSameFile(host, dashboard) {
			t.Errorf("service %s: GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH %s is not the mounted deploy/grafana/sluice.json", name, *v)
		}
	}
}

// composeDockerStage is one FROM ... stage of a Dockerfile, its instructions with
// continuation lines joined.
type composeDockerStage struct {
	from, name string
	lines      []string
}

func composeReadDockerfile(t *testing.T, path string) []composeDockerStage {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stages []composeDockerStage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		fields := strings.Fields(line)
		if strings.EqualFold(fields[0], "FROM") {
			st := composeDockerStage{}
			for _, fl := range fields[1:] {
				if strings.HasPrefix(fl, "--") {
					continue // --platform
				}
				if st.from == "" {
					st.from = fl
				} else if !strings.EqualFold(fl, "AS") {
					st.name = fl
				}
			}
			stages = append(stages, st)
			return
		}
		if len(stages) == 0 {
			if !strings.EqualFold(fields[0], "ARG") {
				t.Errorf("%s: %q before the first FROM", path, line)
			}
			return
		}
		stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return stages
}

// composeGoVersion is the Go the module builds with: go.mod's toolchain line,
// else its go line.
func composeGoVersion(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(composeRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var goLine, toolchain string
	for _, line := range strings.Split(string(raw), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 2 && fields[0] == "go" {
			goLine = fields[1]
		}
		if len(fields) == 2 && fields[0] == "toolchain" {
			toolchain = strings.TrimPrefix(fields[1], "go")
		}
	}
	if toolchain != "" {
		return toolchain
	}
	return goLine
}

// TestComposeDockerfile checks the image the stack builds: multi-stage, a
// static build of ./cmd/sluice on go.mod's Go, a distroless or scratch final
// stage run by a numeric non-root user, /sluice as the entrypoint, and a
// .dockerignore that keeps out nothing the build reads.
func TestComposeDockerfile(t *testing.T) {
	path := filepath.Join(composeRoot, "Dockerfile")
	stages := composeReadDockerfile(t, path)
	if len(stages) < 2 {
		t.Fatalf("%s: %d stage(s), want a builder and a final stage", path, len(stages))
	}
	builder, final := stages[0], stages[len(stages)-1]

	// The builder: golang:<go.mod's version>[-variant].
	want := composeGoVersion(t)
	image, tag, _ := strings.Cut(builder.from, ":")
	version, _, _ := strings.Cut(tag, "-")
	if image != "golang" && image != "docker.io/library/golang" {
		t.Errorf("%s: builder FROM %s, want golang:%s", path, builder.from, want)
	} else if version != want {
		t.Errorf("%s: builder FROM %s, but go.mod wants Go %s", path, builder.from, want)
	}

	// The go build of ./cmd/sluice, one command of a RUN (split at &&, ;),
	// and whether its stage sets CGO_ENABLED=0 for every command.
	var build string
	stageStatic, probeBuilt := false, false
	for _, st := range stages[:len(stages)-1] {
		static := false
		for _, line := range st.lines {
			word, rest, _ := strings.Cut(line, " ")
			switch strings.ToUpper(word) {
			case "ENV", "ARG":
				static = static || composeCGOSetRE.MatchString(rest)
			case "RUN":
				for _, c := range composeShellSplitRE.Split(rest, -1) {
					if strings.Contains(c, "go build") && strings.Contains(c, "./cmd/sluice") {
						build, stageStatic = strings.TrimSpace(c), static
					}
					probeBuilt = probeBuilt || strings.Contains(c, "go build") && strings.Contains(c, "./deploy/compose/probe")
				}
			}
		}
	}
	switch {
	case build == "":
		t.Errorf("%s: no RUN go build ... ./cmd/sluice in a build stage", path)
	case !stageStatic && !regexp.MustCompile(`\bCGO_ENABLED=0\b`).MatchString(build):
		t.Errorf("%s: %q: want CGO_ENABLED=0, a static binary for the distroless/scratch stage", path, build)
	case !strings.Contains(build, "-trimpath"):
		t.Errorf("%s: %q: want -trimpath", path, build)
	}

	// The final stage.
	if !strings.HasPrefix(final.from, "gcr.io/distroless/static") && final.from != "scratch" {
		t.Errorf("%s: final stage FROM %s, want gcr.io/distroless/static... or scratch", path, final.from)
	}
	var user, entrypoint string
	copies := map[string]string{} // destination -> COPY line
	for _, line := range final.lines {
		word, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(word) {
		case "USER":
			user = strings.TrimSpace(rest)
		case "ENTRYPOINT":
			entrypoint = strings.TrimSpace(rest)
		case "COPY":
			fields := strings.Fields(rest)
			copies[fields[len(fields)-1]] = line
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("%s: final stage USER %q, want a numeric non-root uid (e.g. 65532:65532)", path, user)
	}
	if entrypoint != `["/sluice"]` {
		t.Errorf("%s: ENTRYPOINT %s, want [\"/sluice\"] (compose gives the part as the command)", path, entrypoint)
	}
	if c, ok := copies["/sluice"]; !ok || !strings.Contains(c, "--from=") {
		t.Errorf("%s: the final stage does not COPY --from the builder to /sluice", path)
	}
	// compose.yaml's healthchecks run /probe.
	if _, ok := copies["/probe"]; !ok || !probeBuilt {
		t.Errorf("%s: the final stage lacks /probe, built from ./deploy/compose/probe; the services' healthchecks run it", path)
	}

	// .dockerignore: nothing the build reads is left out of the context.
	ignore, err := os.Open(filepath.Join(composeRoot, ".dockerignore"))
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	defer ignore.Close()
	patterns, err := ignorefile.ReadAll(ignore)
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	if !pm.Exclusions() && len(patterns) == 0 {
		t.Errorf(".dockerignore is empty: .git, bin and .sluice would go into every build's context")
	}
	needed := []string{"go.mod", "go.sum"}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	list := exec.Command(goBin, "list", "-deps", "-f",
		`{{if and .Module .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}`,
		"./cmd/sluice", "./deploy/compose/probe")
	list.Dir = composeRoot
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, _ := filepath.Abs(composeRoot)
	for _, file := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, file)
		if err != nil {
			t.Fatal(err)
		}
		needed = append(needed, filepath.ToSlash(rel))
	}
	for _, file := range needed {
		if excluded, _ := pm.MatchesOrParentMatches(file); excluded {
			t.Errorf(".dockerignore excludes %s, which the image's go build reads", file)
		}
	}
}

// ---- the secured overlay ------------------------------------------------------

// composeSecretFlags are the flags that carry a secret inline; the secured
// stack gives each through its --*-file form only (docs/security.md).
var composeSecretFlags = []string{"tokens", "admin-tokens", "admin-token", "canary-token", "periodic-token",
	"redis-password", "redis-sentinel-password", "kafka-sasl-password", "consul-token"}

// composeInfraTLS is what a service of the stack serves on one port: TLS,
// and the login it asks for ("scram", "acl", "token" or "").
type composeInfraTLS struct {
	tls   bool
	login string
	why   string // for messages
}

// composeServesOn reads how service name serves port from its own settings:
// a part's --tls-cert-file, Redis's --port/--tls-port and ACL file, Kafka's
// advertised listener and its security protocol, Consul's config files
// (bind-mounted HCL: ports.https, ports.http = -1, acl default_policy).
func composeServesOn(t *testing.T, f *composeFile, parts map[string]*composePart, name, port string) composeInfraTLS {
	if p, ok := parts[name]; ok {
		return composeInfraTLS{tls: p.servesTLS(), why: p.where("tls-cert-file")}
	}
	svc := f.Services[name]
	arg := func(flag string) string {
		for i, a := range svc.Command.args {
			if a == flag && i+1 < len(svc.Command.args) {
				return svc.Command.args[i+1]
			}
		}
		return ""
	}
	image, _, _ := strings.Cut(svc.Image, ":")
	switch image {
	case "redis", "valkey/valkey":
		s := composeInfraTLS{tls: arg("--tls-port") == port, why: fmt.Sprintf("service %s: --tls-port %s", name, arg("--tls-port"))}
		if arg("--aclfile") != "" || arg("--requirepass") != "" {
			s.login = "acl"
		}
		return s
	case "apache/kafka", "apache/kafka-native":
		protocols := map[string]string{}
		if v := svc.Environment["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]; v != nil {
			for _, kv := range strings.Split(*v, ",") {
				k, v, _ := strings.Cut(strings.TrimSpace(kv), ":")
				protocols[k] = v
			}
		}
		if v := svc.Environment["KAFKA_ADVERTISED_LISTENERS"]; v != nil {
			for _, l := range strings.Split(*v, ",") {
				listener, hp, _ := strings.Cut(strings.TrimSpace(l), "://")
				if h, p, _ := net.SplitHostPort(hp); h == name && p == port {
					proto := cmp.Or(protocols[listener], listener)
					s := composeInfraTLS{tls: strings.HasSuffix(proto, "SSL"), why: fmt.Sprintf("service %s: listener %s is %s", name, listener, proto)}
					if strings.HasPrefix(proto, "SASL_") {
						s.login = "scram"
					}
					return s
				}
			}
		}
	case "hashicorp/consul":
		var hcl strings.Builder
		for _, a := range svc.Command.args {
			if file, ok := strings.CutPrefix(a, "-config-file="); ok {
				if host := composeHostPath(svc, file); host != "" {
					b, err := os.ReadFile(host)
					if err != nil {
						t.Errorf("service %s: %v", name, err)
					}
					hcl.Write(b)
				}
			}
		}
		conf := hcl.String()
		s := composeInfraTLS{why: fmt.Sprintf("service %s: its -config-file", name)}
		if m := regexp.MustCompile(`\bhttps\s*=\s*(\d+)`).FindStringSubmatch(conf); m != nil && m[1] == port {
			s.tls = true
		}
		if regexp.MustCompile(`default_policy\s*=\s*"deny"`).MatchString(conf) {
			s.login = "token"
		}
		return s
	}
	return composeInfraTLS{}
}

// TestComposeSecure checks what compose.secure.yaml promises on top of
// TestComposeServices' checks of the merged stack: nothing in the network
// is served in clear but the relays' and workers' ops ports; every part
// that dials a TLS port trusts a CA and logs in with the store's login;
// secrets reach the parts only as files, each mounted in the service and
// made by the certs or consul-acl service; every service waits for certs;
// and the Consul policies consul-acl creates are consul.PolicyFor's.
func TestComposeSecure(t *testing.T) {
	f := loadCompose(t, "compose.secure.yaml")
	parts := composeResolve(t, f)
	if t.Failed() {
		t.FailNow()
	}

	// The certs service: a pinned one-shot that all others wait for.
	certs := ""
	for _, name := range slices.Sorted(maps.Keys(f.Services)) {
		if strings.Contains(f.Services[name].Entrypoint.String(), "certs.sh") {
			certs = name
		}
	}
	if certs == "" {
		t.Fatalf("compose.secure.yaml: no service runs secure/certs.sh")
	}
	if r := f.Services[certs].Restart; r != "no" {
		t.Errorf("service %s: restart %q: it runs once, others wait for it to complete", certs, r)
	}
	// alpine has no openssl command: the image must add it.
	if b := f.Services[certs].Build; b == nil || !regexp.MustCompile(`apk add[^\n]*\bopenssl\b`).MatchString(b.DockerfileInline) {
		t.Errorf("service %s: its image does not apk add openssl (build.dockerfile_inline), which certs.sh runs", certs)
	}
	for _, name := range slices.Sorted(maps.Keys(f.Services)) {
		if name == certs {
			continue
		}
		if !composeDependsClosure(f, name)[certs] {
			t.Errorf("service %s: does not wait for %s (depends_on, condition service_completed_successfully): it may start without its certificates", name, certs)
		}
		if c, ok := f.Services[name].DependsOn[certs]; ok && c != "service_completed_successfully" {
			t.Errorf("service %s: depends on %s with %s, want service_completed_successfully", name, certs, c)
		}
	}
	// The scripts that write the files the parts read.
	script := func(svc composeService) string {
		for _, a := range svc.Entrypoint.args {
			if strings.HasSuffix(a, ".sh") {
				if host := composeHostPath(svc, a); host != "" {
					b, err := os.ReadFile(host)
					if err != nil {
						t.Fatal(err)
					}
					return string(b)
				}
			}
		}
		return ""
	}
	type writer struct{ service, target, script string }
	writers := map[string][]writer{} // volume -> who writes it, where
	for _, name := range slices.Sorted(maps.Keys(f.Services)) {
		svc := f.Services[name]
		text := script(svc)
		if text == "" {
			continue
		}
		for _, v := range svc.Volumes {
			m := composeMounts(composeService{Volumes: []string{v}})[0]
			if !m.bind() && m.source != "" && !strings.HasSuffix(v, ":ro") {
				writers[m.source] = append(writers[m.source], writer{name, m.target, text})
			}
		}
	}
	tokenLineRE := regexp.MustCompile(`(?m)^token (\S+)((?: \S+)+)\s*$`)

	for _, pn := range slices.Sorted(maps.Keys(parts)) {
		p := parts[pn]
		svc := p.svc
		// Secrets only from files.
		for _, flag := range composeSecretFlags {
			if p.has(flag) && p.value(flag) != "" {
				t.Errorf("%s: a secret inline; give it with --%s-file (\"\" blanks compose.yaml's)", p.where(flag), flag)
			}
		}
		// Every file a flag names is mounted, and made by the service that
		// writes that volume.
		for _, flag := range slices.Sorted(maps.Keys(p.flags)) {
			path := p.value(flag)
			if !strings.HasSuffix(flag, "-file") || path == "" {
				continue
			}
			m := composeMountOf(svc, path)
			if m == nil {
				t.Errorf("%s %s: nothing is mounted there in service %s", p.where(flag), path, pn)
				continue
			}
			if m.bind() {
				if _, err := os.Stat(composeHostPath(svc, path)); err != nil {
					t.Errorf("%s %s: %v", p.where(flag), path, err)
				}
				continue
			}
			ws, ok := writers[m.source]
			if !ok {
				t.Errorf("%s %s: no service writes volume %s", p.where(flag), path, m.source)
				continue
			}
			rel := strings.TrimPrefix(path, strings.TrimSuffix(m.target, "/")+"/")
			made := false
			var names []string
			for _, w := range ws {
				names = append(names, w.service)
				made = made || strings.Contains(w.script, strings.TrimSuffix(w.target, "/")+"/"+rel)
				if dir, file, _ := strings.Cut(rel, "/"); !made && strings.HasSuffix(file, ".token") {
					// consul-acl's token NAME ... writes <dir>/NAME.token.
					for _, tm := range tokenLineRE.FindAllStringSubmatch(w.script, -1) {
						made = made || tm[1]+".token" == file && strings.Contains(w.script, "/"+dir+"/$1.token")
					}
				}
			}
			if !made {
				t.Errorf("%s %s: none of the services that write volume %s (%v) writes %s", p.where(flag), path, m.source, names, rel)
			}
		}
		if svc.Healthcheck != nil {
			for _, a := range svc.Healthcheck.Test.args {
				if ca, ok := strings.CutPrefix(a, "--ca-file="); ok && composeMountOf(svc, ca) == nil {
					t.Errorf("service %s: healthcheck --ca-file=%s: not mounted", pn, ca)
				}
			}
		}

		// The parts that serve HTTP to clients serve HTTPS.
		if (p.cmd == "gate" || p.cmd == "coordinator" || p.cmd == "console") && !p.servesTLS() {
			t.Errorf("service %s: serves plain HTTP; want --tls-cert-file and --tls-key-file", pn)
		}

		// Every dial of a TLS port trusts the CA; every store asking for a
		// login gets one.
		dial := func(flag, hostport string, need ...string) {
			host, port, err := net.SplitHostPort(hostport)
			if err != nil || f.Services[host].Image == "" && f.Services[host].Build == nil {
				return // TestComposeServices names it
			}
			s := composeServesOn(t, f, parts, host, port)
			if !s.tls {
				t.Errorf("%s %s: %s serves it in clear (%s): the secured stack wants TLS", p.where(flag), hostport, host, s.why)
				return
			}
			for _, n := range need {
				if p.value(n) == "" {
					t.Errorf("%s %s: %s serves TLS (%s) with the stack's CA: want --%s", p.where(flag), hostport, host, s.why, n)
				}
			}
			var login []string
			switch s.login {
			case "acl":
				login = []string{"redis-user", "redis-password-file"}
			case "scram":
				login = []string{"kafka-sasl-mechanism", "kafka-sasl-user", "kafka-sasl-password-file"}
				if m := p.value("kafka-sasl-mechanism"); m != "" && !strings.HasPrefix(strings.ToUpper(m), "SCRAM-") {
					t.Errorf("%s %q: the broker enables SCRAM", p.where("kafka-sasl-mechanism"), m)
				}
			case "token":
				login = []string{"consul-token-file"}
			}
			for _, n := range login {
				if p.value(n) == "" {
					t.Errorf("%s %s: %s asks for a login: want --%s", p.where(flag), hostport, host, n)
				}
			}
		}
		if p.has("redis-addr") && p.value("redis-addr") != "" {
			dial("redis-addr", p.value("redis-addr"), "redis-tls-ca-file")
		}
		if p.has("kafka-brokers") {
			for _, b := range composeSplit(p.value("kafka-brokers")) {
				dial("kafka-brokers", b, "kafka-tls-ca-file")
			}
		}
		if p.has("consul-addr") && p.value("consul-addr") != "" {
			dial("consul-addr", p.value("consul-addr"), "consul-tls-ca-file")
		}
		// The URLs of a gate: https to a gate serving TLS, with the CA.
		for _, u := range []struct{ flag, ca string }{
			{"canary-gate", "canary-gate-tls-ca-file"},
			{"periodic-gate", "periodic-gate-tls-ca-file"},
			{"gate-metrics", "gate-metrics-tls-ca-file"},
		} {
			if !p.has(u.flag) || (u.flag == "canary-gate" && p.value("canary-topics") == "") || (u.flag == "periodic-gate" && p.value("periodic") == "false") {
				continue
			}
			for _, raw := range composeSplit(p.value(u.flag)) {
				pu, err := url.Parse(raw)
				if err != nil {
					continue
				}
				g, ok := parts[pu.Hostname()]
				if !ok {
					t.Errorf("%s %q: %s is no sluice service of the stack", p.where(u.flag), raw, pu.Hostname())
					continue
				}
				if pu.Scheme != g.scheme() {
					t.Errorf("%s %q: service %s serves %s (%s)", p.where(u.flag), raw, g.service, g.scheme(), g.where("tls-cert-file"))
				}
				if pu.Scheme == "https" && p.value(u.ca) == "" {
					t.Errorf("%s %q: want --%s: the gate's certificate is from the stack's CA", p.where(u.flag), raw, u.ca)
				}
			}
		}
		if p.cmd == "coordinator" && p.value("callback-secret-file") == "" {
			t.Errorf("service %s: callbacks unsigned; want --callback-secret-file", pn)
		}
	}

	// The infrastructure serves nothing in clear to the network.
	for _, name := range slices.Sorted(maps.Keys(f.Services)) {
		svc := f.Services[name]
		image, _, _ := strings.Cut(svc.Image, ":")
		switch image {
		case "redis":
			for _, port := range composeServicePorts(t, f, parts, name) {
				if s := composeServesOn(t, f, parts, name, port); !s.tls || s.login != "acl" {
					t.Errorf("service %s: port %s: want TLS only (--port 0 --tls-port) and an --aclfile", name, port)
				}
			}
		case "apache/kafka":
			if svc.Environment["KAFKA_PROCESS_ROLES"] == nil {
				continue
			}
			for _, port := range composeServicePorts(t, f, parts, name) {
				if s := composeServesOn(t, f, parts, name, port); !s.tls || s.login != "scram" {
					t.Errorf("service %s: advertised port %s: want SASL_SSL (%s)", name, port, s.why)
				}
			}
			if v := svc.Environment["KAFKA_SSL_KEYSTORE_LOCATION"]; v == nil || composeMountOf(svc, *v) == nil {
				t.Errorf("service %s: KAFKA_SSL_KEYSTORE_LOCATION is not a mounted file", name)
			}
		case "hashicorp/consul":
			if len(svc.Entrypoint.args) > 0 {
				continue // consul-acl: the image as a client
			}
			for _, port := range composeServicePorts(t, f, parts, name) {
				if s := composeServesOn(t, f, parts, name, port); !s.tls || s.login != "token" {
					t.Errorf("service %s: port %s: want HTTPS (ports.https) and ACLs with default_policy \"deny\"", name, port)
				}
			}
		}
	}

	composeCheckConsulPolicies(t, f, parts)
}

// composeCheckConsulPolicies: the service that runs consul-acl.sh creates
// a policy per `policy PART` line from /policies/PART.hcl, which must be
// consul.PolicyFor of that part for the stack's stage and the relays'
// topics, and a token per `token NAME PART...` line; each part's
// --consul-token-file is such a token, with its own part's policy (the
// coordinator's also the console's, which it serves in process).
func composeCheckConsulPolicies(t *testing.T, f *composeFile, parts map[string]*composePart) {
	var name string
	for _, n := range slices.Sorted(maps.Keys(f.Services)) {
		if strings.Contains(f.Services[n].Entrypoint.String(), "consul-acl.sh") {
			name = n
		}
	}
	if name == "" {
		t.Errorf("compose.secure.yaml: no service runs secure/consul-acl.sh")
		return
	}
	svc := f.Services[name]
	var text string
	for _, a := range svc.Entrypoint.args {
		if strings.HasSuffix(a, "consul-acl.sh") {
			b, err := os.ReadFile(composeHostPath(svc, a))
			if err != nil {
				t.Fatalf("service %s: %v", name, err)
			}
			text = string(b)
		}
	}
	stageM := regexp.MustCompile(`(?m)^STAGE=(\S+)$`).FindStringSubmatch(text)
	if stageM == nil {
		t.Fatalf("service %s: consul-acl.sh sets no STAGE=", name)
	}
	stage := stageM[1]
	var relayTopics []string
	for _, pn := range slices.Sorted(maps.Keys(parts)) {
		p := parts[pn]
		if p.has("stage") && p.value("stage") != stage {
			t.Errorf("%s is %q, but consul-acl.sh's policies are for stage %q", p.where("stage"), p.value("stage"), stage)
		}
		if p.cmd == "relay" {
			relayTopics = composeSplit(p.value("topics"))
		}
	}
	if !strings.Contains(text, `@/policies/$1.hcl`) {
		t.Errorf("service %s: consul-acl.sh does not create policy PART from /policies/PART.hcl", name)
	}
	policyDir := composeHostPath(svc, "/policies/x.hcl")
	if policyDir == "" {
		t.Fatalf("service %s: nothing is bind-mounted at /policies", name)
	}
	policyDir = filepath.Dir(policyDir)
	created := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^policy (\S+)\s*$`).FindAllStringSubmatch(text, -1) {
		part := m[1]
		created[part] = true
		want, err := consul.PolicyFor(consul.Policy{Part: part, Stage: stage, Topics: relayTopics})
		if err != nil {
			t.Errorf("consul-acl.sh: policy %s: %v", part, err)
			continue
		}
		file := filepath.Join(policyDir, part+".hcl")
		got, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("consul-acl.sh: policy %s: %v", part, err)
			continue
		}
		if string(got) != want {
			t.Errorf("%s is not consul.PolicyFor(%s, stage %s, topics %v); regenerate it with\n  sluice consul-policy --stage %s --topics %s %s > %s\ngot:\n%s\nwant:\n%s",
				file, part, stage, relayTopics, stage, strings.Join(relayTopics, ","), part, file, got, want)
		}
	}
	tokens := map[string][]string{}
	for _, m := range regexp.MustCompile(`(?m)^token (\S+)((?: \S+)+)\s*$`).FindAllStringSubmatch(text, -1) {
		tokens[m[1]] = strings.Fields(m[2])
		for _, part := range tokens[m[1]] {
			if !created[part] {
				t.Errorf("consul-acl.sh: token %s has policy %s, which it does not create", m[1], part)
			}
		}
	}
	for _, pn := range slices.Sorted(maps.Keys(parts)) {
		p := parts[pn]
		if !p.has("consul-addr") || p.value("consul-addr") == "" {
			continue
		}
		file := p.value("consul-token-file")
		tokenName := strings.TrimSuffix(filepath.Base(file), ".token")
		has, ok := tokens[tokenName]
		if !ok || !strings.HasSuffix(file, ".token") {
			t.Errorf("%s %q: not a token consul-acl.sh makes (token NAME ... writes NAME.token)", p.where("consul-token-file"), file)
			continue
		}
		need := []string{p.cmd}
		if p.cmd == "coordinator" && p.value("console") != "false" {
			need = append(need, "console")
		}
		for _, n := range need {
			if !slices.Contains(has, n) {
				t.Errorf("%s: token %s has policies %v, without %s's: Consul (default deny) refuses what %s does", p.where("consul-token-file"), tokenName, has, n, n)
			}
		}
	}
}
