// Package reload re-reads a configuration file while a part runs: the
// gate's tokens, the console's admin tokens. A file is read again when its
// content changes (compared every Options.Every, so an editor's rename and
// a Kubernetes secret's symlink swap are both seen) and on SIGHUP. A new content that does not parse is
// logged and the last good one stays in force: a typo must not lock every
// client out, nor let anyone in. The callers' load functions also refuse a
// content that would leave the part with no credential at all (an emptied
// or half-written file), for the same reason. The coordinator's callback
// secrets, read before each attempt, keep their last good set the same way
// (callback.SecretsFile).
package reload

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Options configures Watch.
type Options struct {
	// Every is how often the file's stamp is compared. Default 1s.
	Every time.Duration
	// Log gets the reloads and the refused contents. Default slog.Default().
	Log *slog.Logger
	// Signals, if set, replaces SIGHUP as what asks for a reload now
	// (tests). Default nil: SIGHUP.
	Signals <-chan os.Signal
}

// stamp is the file's content hash: a stat's size and time would miss a
// rewrite of the same size within the file system's clock tick.
func stamp(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return string(sum[:]), nil
}

// Watch calls load(path) whenever path changes or a SIGHUP comes, until ctx
// ends, and apply with each value that loads without error. The caller
// loads the file once at start, where an error should stop the part; Watch
// loads it again at its first look, so a change made between the two is
// not missed. what names the file in logs ("gate tokens").
func Watch[T any](ctx context.Context, path, what string, opts Options, load func(string) (T, error), apply func(T)) {
	if opts.Every <= 0 {
		opts.Every = time.Second
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("file", path, "what", what)
	sig := opts.Signals
	if sig == nil {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGHUP)
		defer signal.Stop(ch)
		sig = ch
	}
	last, refused := "", "" // last: the stamp in force ("": none yet)
	tick := time.NewTicker(opts.Every)
	defer tick.Stop()
	for {
		forced := false
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-sig:
			forced = true
		}
		now, err := stamp(path)
		if err != nil {
			if refused != "missing" {
				log.Error("reload: cannot read the file; the last good one stays in force", "err", err)
				refused = "missing"
			}
			continue
		}
		if now == last && !forced {
			continue
		}
		v, err := load(path)
		if err != nil {
			if refused != now {
				log.Error("reload: the file's new content is refused; the last good one stays in force", "err", err)
				refused = now
			}
			continue
		}
		apply(v)
		if last != "" || forced {
			log.Info("reload: in force", "signal", forced)
		}
		last, refused = now, ""
	}
}
