package client_test

import (
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestAnswersAreTheServersTypes: the client decodes the gate's answers
// into the types the gate encodes them from (internal/wire), not into
// copies whose fields or JSON tags could drift (they had: the client's
// group status lacked the server's omitempty tags).
func TestAnswersAreTheServersTypes(t *testing.T) {
	for _, c := range []struct{ client, server any }{
		{client.GroupStatus{}, wire.GroupStatus{}},
		{client.GroupCancelled{}, wire.GroupCancelled{}},
		{client.JobInfo{}, wire.JobView{}},
	} {
		ct, st := reflect.TypeOf(c.client), reflect.TypeOf(c.server)
		if ct != st {
			t.Errorf("client.%s is a copy of %s, not the type itself: make it an alias (type %s = wire.%s)", ct.Name(), st, ct.Name(), st.Name())
		}
	}
}
