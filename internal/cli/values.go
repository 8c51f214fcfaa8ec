package cli

import (
	"flag"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The flag values below bind a flag to a field of a part's Config, so
// that the Config is the one definition of each setting: its value when
// the flag is registered is the default --help shows. Each Set replaces
// the value (a flag given twice keeps the last one, like every other
// flag, so environment and command line do not merge).

// DurationVar is flag.DurationVar that also rejects negative values.
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(durationValue{p}, name, usage)
}

type durationValue struct{ p *time.Duration }

func (d durationValue) String() string {
	if d.p == nil {
		return ""
	}
	return d.p.String()
}

func (d durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("must not be negative")
	}
	*d.p = v
	return nil
}

// StringsVar binds a comma-separated list flag ("a,b,c") to a []string;
// blanks around names and empty names are dropped.
func StringsVar(fs *flag.FlagSet, p *[]string, name string, value []string, usage string) {
	*p = value
	fs.Var(stringsValue{p}, name, usage)
}

type stringsValue struct{ p *[]string }

func (v stringsValue) String() string {
	if v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}

func (v stringsValue) Set(s string) error {
	var l ListFlag
	l.Set(s)
	*v.p = l
	return nil
}

// IntRangesVar binds a list of numbers and ranges ("0-3,6") to a []int;
// see ParseIntRanges.
func IntRangesVar(fs *flag.FlagSet, p *[]int, name string, value []int, usage string) {
	*p = value
	fs.Var(intRangesValue{p}, name, usage)
}

type intRangesValue struct{ p *[]int }

func (v intRangesValue) String() string {
	if v.p == nil {
		return ""
	}
	s := make([]string, len(*v.p))
	for i, n := range *v.p {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (v intRangesValue) Set(s string) error {
	ns, err := ParseIntRanges(s)
	if err != nil {
		return err
	}
	*v.p = ns
	return nil
}

// ParseIntRanges reads "0-7", "1,3,5-6" or "" (nil): numbers not below 0
// and inclusive ranges, in the order given, each number once. Whether a
// number is in range of what it counts is the caller's to check.
func ParseIntRanges(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, fmt.Errorf("%q: want numbers from 0 like \"0-3\" or \"1,5\"", part)
		}
		for n := a; n <= b; n++ {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// DurationMapVar binds "name=24h,other=1h" to a map[string]time.Duration;
// see ParseDurationMap.
func DurationMapVar(fs *flag.FlagSet, p *map[string]time.Duration, name string, value map[string]time.Duration, usage string) {
	*p = value
	fs.Var(durationMapValue{p}, name, usage)
}

type durationMapValue struct{ p *map[string]time.Duration }

func (v durationMapValue) String() string {
	if v.p == nil {
		return ""
	}
	var s []string
	for k, d := range *v.p {
		s = append(s, k+"="+d.String())
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

func (v durationMapValue) Set(s string) error {
	m, err := ParseDurationMap(s)
	if err != nil {
		return err
	}
	*v.p = m
	return nil
}

// ParseDurationMap reads "orders=24h,other=1h": names with durations not
// below 0. An empty string is an empty map.
func ParseDurationMap(s string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, def := range strings.Split(s, ",") {
		if def = strings.TrimSpace(def); def == "" {
			continue
		}
		name, v, ok := strings.Cut(def, "=")
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if !ok || strings.TrimSpace(name) == "" || err != nil || d < 0 {
			return nil, fmt.Errorf("%q: want <name>=<duration>, e.g. orders=24h", def)
		}
		out[strings.TrimSpace(name)] = d
	}
	return out, nil
}

// KeepValues calls register, which adds flags to fs bound to *p but with
// defaults of its own (kafka.Config.Register), then puts back the value *p
// had and shows it as the default of every flag register added: a part's
// RegisterFlags keeps its Config's values.
func KeepValues[T any](fs *flag.FlagSet, p *T, register func()) {
	had := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { had[f.Name] = true })
	saved := *p
	register()
	*p = saved
	fs.VisitAll(func(f *flag.Flag) {
		if !had[f.Name] {
			f.DefValue = f.Value.String()
		}
	})
}
