package consul

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/hashicorp/consul/api"
)

// WatchPrefix is Watch for every key under a prefix, such as the execution
// limits under sluice/<stage>/limits/: fn gets all of them at once, by name
// relative to the prefix, at start and whenever a key appears, changes or
// goes. One blocking query follows the whole prefix, however many keys.
//
// It behaves as Watch does: on Consul errors fn is not called and the last
// values stay in force; failed queries back off and are logged once per
// outage; a restarted agent's lower index is noticed and read afresh; the
// loop sends at most opts.Rate queries per second, coalescing changes. fn
// runs on WatchPrefix's goroutine and may keep the map it is given.
//
// prefix must end with '/', so that "limits/" does not also match
// "limitsx". The prefix key itself (a "folder" some tools create) is
// skipped.
func WatchPrefix(ctx context.Context, client *api.Client, prefix string, opts WatchOptions, fn func(values map[string][]byte)) error {
	if client == nil {
		return errors.New("consul: WatchPrefix needs a client")
	}
	if prefix == "" || strings.HasPrefix(prefix, "/") || !strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("consul: WatchPrefix prefix %q must end with '/' and have no leading '/'", prefix)
	}
	opts, err := opts.resolve()
	if err != nil {
		return err
	}
	w := &prefixWatch{fn: fn}
	kv := client.KV()
	newWatchLoop(opts, opts.Log.With("prefix", prefix)).run(ctx, func(q *api.QueryOptions) (*api.QueryMeta, error) {
		pairs, meta, err := kv.List(prefix, q)
		if err == nil {
			w.latest = make(map[string][]byte, len(pairs))
			for _, p := range pairs {
				if name := strings.TrimPrefix(p.Key, prefix); name != "" {
					w.latest[name] = p.Value
				}
			}
		}
		return meta, err
	}, w.deliver)
	return nil
}

// prefixWatch is what WatchPrefix remembers of its keys.
type prefixWatch struct {
	fn     func(map[string][]byte)
	latest map[string][]byte // the last answer
	called bool
	seen   map[string][]byte // what fn last saw
}

// deliver calls fn when a key appeared, went or has a new value: a blocking
// query also returns on changes elsewhere, and after WaitTime.
func (w *prefixWatch) deliver() {
	if w.called && maps.EqualFunc(w.latest, w.seen, bytes.Equal) {
		return
	}
	w.called, w.seen = true, w.latest
	w.fn(maps.Clone(w.latest)) // fn may keep its map; the values are never written
}
