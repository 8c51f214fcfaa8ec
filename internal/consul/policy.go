package consul

import (
	"fmt"
	"slices"
	"strings"
)

// Parts are the parts that talk to Consul, as PolicyFor names them. The
// gate never does.
var Parts = []string{"relay", "worker", "coordinator", "console"}

// Policy asks PolicyFor for the least ACL policy of one part.
type Policy struct {
	// Part is one of Parts.
	Part string
	// Stage is the stage whose keys (sluice/<stage>/) the part uses.
	Stage string
	// Topics, when given, narrow the relay's and the console's rules on
	// relay keys to these topics' rate and lock keys; without them the
	// rules cover every topic (sluice/<stage>/relay/). A topic added later
	// then needs a policy update.
	Topics []string
}

// PolicyFor returns the least Consul ACL policy (HCL rules) p.Part needs
// under Consul's default_policy "deny": the KV keys it reads and writes
// under sluice/<stage>/, and session write for the parts that hold a lock.
// docs/secure/consul.md explains each rule; the tests run every part with
// a token of exactly this policy.
func PolicyFor(p Policy) (string, error) {
	if err := checkSegment("stage", p.Stage); err != nil {
		return "", err
	}
	for _, t := range p.Topics {
		if err := checkSegment("topic", t); err != nil {
			return "", err
		}
	}
	root := "sluice/" + p.Stage + "/"
	var b strings.Builder
	fmt.Fprintf(&b, "# sluice %s, stage %s: the least policy (docs/secure/consul.md)\n", p.Part, p.Stage)
	key := func(kind, name, policy, why string) {
		fmt.Fprintf(&b, "# %s\n%s %q {\n  policy = %q\n}\n", why, kind, name, policy)
	}
	// A lock is a session of the holder's own (created, renewed,
	// destroyed: session write on the node of the agent it talks to) and
	// a KV key it acquires (key write).
	session := func() {
		key("session_prefix", "", "write", "its lock's session: create, renew, destroy (narrow to session \"<agent node>\" if every agent's node name is known)")
	}
	switch p.Part {
	case "relay":
		if len(p.Topics) == 0 {
			key("key_prefix", root+"relay/", "write", "each topic's lock (write) relay/<topic>/lock and rate (read) relay/<topic>/rate")
		}
		for _, t := range p.Topics {
			key("key", root+"relay/"+t+"/lock", "write", "topic "+t+"'s lock")
			key("key", root+"relay/"+t+"/rate", "read", "topic "+t+"'s relay rate, watched")
		}
		key("key_prefix", root+"topics/", "read", "the stage's topic list, watched (--follow-topics; a listed topic's lock and rate need the relay/ rules above: narrowed to --topics, list them too)")
		session()
	case "worker":
		key("key_prefix", root+"limits/", "read", "the execution rate limits, watched")
		key("key_prefix", root+"topics/", "read", "the stage's topic list, watched by a worker that follows it (sluice dev's)")
	case "coordinator":
		key("key", root+"coordinator/lock", "write", "the coordinator's lock")
		key("key_prefix", root+"scaling", "read", "the scaling parameters (scaling) and the operators' pins (scaling/pins/), watched")
		key("key_prefix", root+"periodic/", "read", "the periodic schedules, watched (their state is in Redis)")
		session()
	case "console":
		if len(p.Topics) == 0 {
			key("key_prefix", root+"relay/", "write", "the relay rates, listed, set and lifted (relay/<topic>/rate); this covers the relays' locks too: name the topics to narrow it")
		} else {
			key("key_prefix", root+"relay/", "read", "the relay rates, listed (GET /api/v1/rates)")
		}
		for _, t := range p.Topics {
			key("key", root+"relay/"+t+"/rate", "write", "topic "+t+"'s relay rate, set and lifted")
		}
		key("key_prefix", root+"limits/", "write", "the execution rate limits, listed, set and lifted")
		key("key", root+"scaling", "read", "the scaling parameters, shown by a console without a coordinator in its process")
		key("key_prefix", root+"scaling/pins/", "write", "the scale pins, listed, set and lifted")
		key("key_prefix", root+"periodic/", "write", "the periodic schedules, listed, created, changed, paused and deleted")
		key("key_prefix", root+"topics/", "write", "the stage's topic list: sluice topics create, ls, describe, delete")
	default:
		return "", fmt.Errorf("consul: no policy for part %q: the parts that use Consul are %s", p.Part, strings.Join(Parts, ", "))
	}
	return b.String(), nil
}

// KnownPart reports whether part is one of Parts.
func KnownPart(part string) bool { return slices.Contains(Parts, part) }
