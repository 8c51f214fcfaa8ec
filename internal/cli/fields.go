package cli

import (
	"flag"
	"reflect"
	"strconv"
)

// FlagFields says which fields of *cfg each flag of fs sets: flag name ->
// field paths ("BatchSize", "Kafka.Brokers"; the fields of an embedded
// struct by their own names, as Go promotes them). fs must hold flags
// registered on cfg (a part's Config.RegisterFlags). Each flag is set to a
// few probe values in turn, on cfg itself, until one is accepted and
// changes a field; cfg is put back as it was after each. A flag that no
// probe changes anything with is left out.
//
// The binary names the flag behind a field a library error names
// ("relay: Config.BatchSize: ..."), and tests check that every field has a
// flag.
func FlagFields(fs *flag.FlagSet, cfg any) map[string][]string {
	v := reflect.ValueOf(cfg).Elem()
	saved := reflect.New(v.Type()).Elem()
	saved.Set(v)
	out := map[string][]string{}
	fs.VisitAll(func(f *flag.Flag) {
		defer v.Set(saved)
		for _, probe := range probes(f) {
			v.Set(saved)
			// Value.Set, not fs.Set: the flag must not count as given.
			if f.Value.Set(probe) != nil {
				continue
			}
			if changed := changedFields(saved, v, ""); len(changed) > 0 {
				out[f.Name] = changed
				return
			}
		}
	})
	return out
}

// probes are values to set f to, of the shapes sluice's flags take.
func probes(f *flag.Flag) []string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		cur, _ := strconv.ParseBool(f.Value.String())
		return []string{strconv.FormatBool(!cur)}
	}
	return []string{"17", "19", "17s", "0.17", "p17", "0=p17:1", "t17=17s", "1-2"}
}

// changedFields are the paths of the exported fields that differ between
// a and b, structs of one type; functions are not compared.
func changedFields(a, b reflect.Value, prefix string) []string {
	var out []string
	t := a.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		fa, fb := a.Field(i), b.Field(i)
		switch {
		case sf.Anonymous && sf.Type.Kind() == reflect.Struct:
			out = append(out, changedFields(fa, fb, prefix)...)
		case sf.Type.Kind() == reflect.Struct:
			out = append(out, changedFields(fa, fb, prefix+sf.Name+".")...)
		case sf.Type.Kind() == reflect.Func:
		default:
			if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
				out = append(out, prefix+sf.Name)
			}
		}
	}
	return out
}

// ConfigFields lists the paths of every exported field of the struct cfg
// points to, as FlagFields names them: nested structs field by field,
// functions included.
func ConfigFields(cfg any) []string {
	return fieldPaths(reflect.TypeOf(cfg).Elem(), "")
}

func fieldPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		sf := t.Field(i)
		switch {
		case !sf.IsExported():
		case sf.Anonymous && sf.Type.Kind() == reflect.Struct:
			out = append(out, fieldPaths(sf.Type, prefix)...)
		case sf.Type.Kind() == reflect.Struct:
			out = append(out, fieldPaths(sf.Type, prefix+sf.Name+".")...)
		default:
			out = append(out, prefix+sf.Name)
		}
	}
	return out
}
