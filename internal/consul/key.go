package consul

import (
	"fmt"
	"strings"
)

// Key returns the Consul KV key "sluice/<stage>/<parts joined by '/'>", the
// layout every part shares (docs/relay.md, docs/coordinator.md): Key("dev", "relay", "jobs", "lock") is
// "sluice/dev/relay/jobs/lock".
//
// The stage and each part must be one non-empty path segment: no '/', and
// neither "." nor "..". A '/' inside a part would silently move the key into
// another part's namespace (a topic "a/rate" would collide with topic "a"'s
// rate key), and Consul's HTTP API cleans "." and ".." out of request paths,
// so such a key would be read and written somewhere else. Parts often come
// from configuration (a topic, a resource name), so a bad one is an error,
// not a panic.
func Key(stage string, parts ...string) (string, error) {
	if err := checkSegment("stage", stage); err != nil {
		return "", err
	}
	if len(parts) == 0 {
		return "", fmt.Errorf("consul: key under stage %q has no parts", stage)
	}
	for i, p := range parts {
		if err := checkSegment(fmt.Sprintf("part %d", i+1), p); err != nil {
			return "", err
		}
	}
	return "sluice/" + stage + "/" + strings.Join(parts, "/"), nil
}

func checkSegment(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("consul: key %s is empty", what)
	case strings.Contains(s, "/"):
		return fmt.Errorf("consul: key %s %q contains '/'", what, s)
	case s == "." || s == "..":
		return fmt.Errorf("consul: key %s is %q", what, s)
	}
	return nil
}
