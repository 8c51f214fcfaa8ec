package canary

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
)

// Encode is the settings' form in Redis:
// "<interval ms>:<grace ms>:<started ms>:<beat ms>:<holder>".
func (s Settings) Encode() string {
	return fmt.Sprintf("%d:%d:%d:%d:%s", s.Interval.Milliseconds(), s.Grace.Milliseconds(),
		s.Started.UnixMilli(), s.Beat.UnixMilli(), s.Holder)
}

// DecodeSettings reads Encode's form.
func DecodeSettings(v string) (Settings, error) {
	f := strings.SplitN(v, ":", 5)
	if len(f) != 5 {
		return Settings{}, fmt.Errorf("canary monitor settings %q: want <interval ms>:<grace ms>:<started ms>:<beat ms>:<holder>", v)
	}
	var n [4]int64
	for i := range n {
		var err error
		if n[i], err = strconv.ParseInt(f[i], 10, 64); err != nil || n[i] < 0 {
			return Settings{}, fmt.Errorf("canary monitor settings %q: field %d is not a count of ms", v, i+1)
		}
	}
	return Settings{
		Interval: time.Duration(n[0]) * time.Millisecond, Grace: time.Duration(n[1]) * time.Millisecond,
		Started: time.UnixMilli(n[2]), Beat: time.UnixMilli(n[3]), Holder: f[4],
	}, nil
}

// Redis is what Read does in Redis (a *queue.Pool has it): a caller lists
// it in its own Redis surface.
type Redis interface {
	CanaryHashes(ctx context.Context) (map[int]map[string]string, error)
}

// Read reads the monitor's settings (ok false: no monitor has run) and
// every path's record from Redis. Fields it cannot read are skipped.
func Read(ctx context.Context, pool Redis) (s Settings, ok bool, records []Record, err error) {
	hashes, err := pool.CanaryHashes(ctx)
	if err != nil {
		return Settings{}, false, nil, err
	}
	if v, found := hashes[0][queue.CanaryMonitor]; found {
		if s, err = DecodeSettings(v); err == nil {
			ok = true
		}
	}
	return s, ok, Records(hashes), nil
}

// Records reads paths' records out of the partitions' canary hashes: a
// path is known by its sent field; its done field may be missing.
func Records(hashes map[int]map[string]string) []Record {
	var out []Record
	for part, h := range hashes {
		for field, v := range h {
			name, isSent := strings.CutPrefix(field, queue.CanarySentPrefix)
			if !isSent {
				continue
			}
			p, err := ParseField(name, part)
			if err != nil {
				continue
			}
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			r := Record{Path: p, Sent: time.UnixMilli(ms)}
			if d, found := h[queue.CanaryDonePrefix+name]; found {
				sent, done, _ := strings.Cut(d, ":")
				s, err1 := strconv.ParseInt(sent, 10, 64)
				dn, err2 := strconv.ParseInt(done, 10, 64)
				if err1 == nil && err2 == nil {
					r.DoneSent, r.Done = time.UnixMilli(s), time.UnixMilli(dn)
				}
			}
			out = append(out, r)
		}
	}
	return out
}
