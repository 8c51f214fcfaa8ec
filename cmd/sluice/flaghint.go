package main

import (
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/cli"
)

// configFlags is a part's Config (or a piece of one, as queue.StageRedis)
// that registers its flags.
type configFlags[C any] interface {
	*C
	RegisterFlags(*flag.FlagSet)
}

// fieldFlags maps each field of cfg's type that a flag sets to the flag's
// name.
func fieldFlags[C any, P configFlags[C]](cfg C) map[string]string {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	P(&cfg).RegisterFlags(fs)
	byField := map[string]string{}
	for name, fields := range cli.FlagFields(fs, &cfg) {
		for _, f := range fields {
			byField[f] = name
		}
	}
	return byField
}

// configFieldRE finds the Config fields a part's error names
// ("relay: Config.BatchSize: must be at least 1", "Config.Canary.Interval",
// "CanaryConfig.Interval").
var configFieldRE = regexp.MustCompile(`Config\.([A-Z][A-Za-z0-9]*(?:\.[A-Z][A-Za-z0-9]*)*)`)

// flagHint adds to err the flags and variables that set the Config fields
// it names: the parts' errors name fields, because a program that embeds a
// part has no flags, while an operator of sluice <part> needs the flag.
func flagHint[C any, P configFlags[C]](err error, part string, cfg C) error {
	if err == nil {
		return nil
	}
	byField := fieldFlags[C, P](cfg)
	var hints []string
	for _, m := range configFieldRE.FindAllStringSubmatch(err.Error(), -1) {
		if name, ok := byField[m[1]]; ok {
			if h := "--" + name + " / " + cli.EnvName(part, name); !slices.Contains(hints, h) {
				hints = append(hints, h)
			}
		}
	}
	if len(hints) == 0 {
		return err
	}
	return fmt.Errorf("%w (set by %s)", err, strings.Join(hints, ", "))
}
