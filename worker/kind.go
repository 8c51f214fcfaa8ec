package worker

import (
	"fmt"
	"reflect"
)

// kinder is a payload type that names its job type (client.JobArgs).
type kinder interface{ Kind() string }

// typeOf is the job type HandleTyped registers: jobType when given, else
// T's Kind(), called on T's zero value (a *X points at a zero X), its
// method on T or *T. It panics when there is neither, as a mistake in
// code: registration happens before Run.
func typeOf[T any](call, jobType string) string {
	if jobType != "" {
		return jobType
	}
	var zero T
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
		reflect.ValueOf(&zero).Elem().Set(reflect.New(t.Elem()))
	}
	for _, v := range []any{zero, &zero} {
		if k, ok := v.(kinder); ok {
			if kind := k.Kind(); kind != "" {
				return kind
			}
		}
	}
	panic(fmt.Sprintf("worker.%s: job type \"\" and %T has no Kind() string method (client.JobArgs) answering one: pass the job type", call, zero))
}
