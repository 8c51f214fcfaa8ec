package worker

import (
	"errors"
	"testing"
)

// How an attempt ends once its handler returned, in every case execute
// tells apart: a lost lease wins (its key left to expire after a failure,
// recorded done after a success), then a success (even a cancelled job's),
// then an operator's cancel, then a stop past the drain deadline, and
// only then a failure to record.
func TestAfterHandlerDecidesTheAttemptsEnd(t *testing.T) {
	boom, why := errors.New("boom"), errors.New("lease lost")
	for _, c := range []struct {
		name     string
		e        handlerEnd
		stopping bool
		end      ending
		key      keyEnd
	}{
		{"success", handlerEnd{}, false, endDone, keyDone},
		{"failure", handlerEnd{err: boom}, false, endFailed, keyFreed},
		{"lost, failed", handlerEnd{err: boom, lost: true, why: why}, false, endLost, keyLeft},
		{"lost, succeeded", handlerEnd{lost: true, why: why}, false, endLost, keyDone},
		{"lost and cancelled, failed", handlerEnd{err: boom, lost: true, why: why, cancelled: true}, false, endLost, keyLeft},
		{"cancelled, failed", handlerEnd{err: boom, cancelled: true}, false, endCancelled, keyFreed},
		{"cancelled, succeeded", handlerEnd{cancelled: true}, false, endDone, keyDone},
		{"cut short by the drain deadline", handlerEnd{err: boom, draining: true}, true, endLeft, keyFreed},
		{"failed while draining, before the deadline", handlerEnd{err: boom, draining: true}, false, endFailed, keyFreed},
		{"succeeded past the drain deadline", handlerEnd{draining: true}, true, endDone, keyDone},
	} {
		s := afterHandler(c.e, c.stopping)
		if s.end != c.end || s.key != c.key {
			t.Errorf("%s: end %d key %d, want end %d key %d", c.name, s.end, s.key, c.end, c.key)
		}
		switch s.end {
		case endFailed:
			if s.err != boom {
				t.Errorf("%s: err %v, want the handler's", c.name, s.err)
			}
		case endLost:
			if s.err != why {
				t.Errorf("%s: err %v, want why the lease is gone", c.name, s.err)
			}
		}
	}
}
