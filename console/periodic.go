package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/periodic"
	"github.com/sluicehq/sluice/internal/queue"
)

// The periodic schedules of docs/periodic.md, under /api/v1/periodic. A
// schedule is written only once it parses as the coordinator's scheduler
// parses it (periodic.Schedule.Check), and by check-and-set, so two
// operators' changes cannot silently overwrite each other.

// periodicNext is how many upcoming slots an answer lists.
const periodicNext = 3

func (con *Console) periodicKey(name string) (string, error) {
	key, err := periodic.ScheduleKey(con.cfg.Stage, name)
	if err != nil {
		return "", badRequest(err.Error(), "")
	}
	return key, nil
}

// periodicView builds a schedule's answer from its value and state.
func (con *Console) periodicView(r *http.Request, name string, value []byte, state string) admin.PeriodicState {
	v := admin.PeriodicState{Name: name}
	if state != "" {
		if st, err := periodic.DecodeState([]byte(state)); err == nil {
			v.State = &st
		}
	}
	p, err := periodic.Parse(name, value)
	if err != nil {
		v.Error = err.Error()
		return v
	}
	v.Schedule = &p.Schedule
	if !p.Paused {
		for t := con.cfg.Now(); len(v.Next) < periodicNext; {
			if t = p.Next(t); t.IsZero() {
				break
			}
			v.Next = append(v.Next, t.UTC())
		}
	}
	if v.State != nil && v.State.LastJob != "" {
		l := queue.JobLookup{Topic: v.State.LastTopic, ID: v.State.LastJob, Group: p.Group}
		if w, err := con.pool.FindJob(r.Context(), l); err == nil {
			jv := w.View(l)
			v.LastJob = &jv
		}
	}
	return v
}

func (con *Console) periodicList(r *http.Request, _ admin.Role) (any, error) {
	prefix, err := periodic.SchedulesPrefix(con.cfg.Stage)
	if err != nil {
		return nil, badRequest(err.Error(), "")
	}
	qo := (&consulapi.QueryOptions{}).WithContext(r.Context())
	pairs, _, err := con.kv().List(prefix, qo)
	if err != nil {
		return nil, con.consulErr(err)
	}
	states, err := con.pool.PeriodicStates(r.Context())
	if err != nil {
		return nil, con.redisErr(err)
	}
	out := admin.PeriodicList{Schedules: []admin.PeriodicState{}}
	for _, p := range pairs {
		if name := strings.TrimPrefix(p.Key, prefix); name != "" {
			out.Schedules = append(out.Schedules, con.periodicView(r, name, p.Value, states[name]))
		}
	}
	return out, nil
}

// readPeriodic reads a schedule's pair (nil: absent) and its state.
func (con *Console) readPeriodic(r *http.Request, name string) (key string, pair *consulapi.KVPair, state string, err error) {
	if key, err = con.periodicKey(name); err != nil {
		return "", nil, "", err
	}
	if pair, _, err = con.kv().Get(key, (&consulapi.QueryOptions{}).WithContext(r.Context())); err != nil {
		return "", nil, "", con.consulErr(err)
	}
	states, err := con.pool.PeriodicStates(r.Context())
	if err != nil {
		return "", nil, "", con.redisErr(err)
	}
	return key, pair, states[name], nil
}

// noSchedule is the 404 of a schedule that does not exist.
func noSchedule(name string) error {
	return &admin.Error{Status: http.StatusNotFound, Message: "no periodic schedule " + strconv.Quote(name), Fix: "sluice periodic ls lists them; sluice periodic set creates one"}
}

// readExisting is readPeriodic for a schedule that must exist (404 else).
func (con *Console) readExisting(r *http.Request, name string) (key string, pair *consulapi.KVPair, state string, err error) {
	key, pair, state, err = con.readPeriodic(r, name)
	if err == nil && pair == nil {
		err = noSchedule(name)
	}
	return key, pair, state, err
}

func (con *Console) periodicGet(r *http.Request, _ admin.Role) (any, error) {
	name := r.PathValue("name")
	_, pair, state, err := con.readExisting(r, name)
	if err != nil {
		return nil, err
	}
	return con.periodicView(r, name, pair.Value, state), nil
}

// writePeriodic checks s and writes it if the key is still at index (0:
// absent); a concurrent change is a 409.
func (con *Console) writePeriodic(r *http.Request, key, name string, s periodic.Schedule, index uint64) error {
	if _, err := s.Check(name); err != nil {
		return badRequest(err.Error(), "docs/periodic.md lists the fields")
	}
	value, err := json.Marshal(s)
	if err != nil {
		return err
	}
	ok, _, err := con.kv().CAS(&consulapi.KVPair{Key: key, Value: value, ModifyIndex: index}, (&consulapi.WriteOptions{}).WithContext(r.Context()))
	if err != nil {
		return con.consulErr(err)
	}
	if !ok {
		return &admin.Error{Status: http.StatusConflict, Message: key + " changed while this request ran", Fix: "read it again and retry"}
	}
	return nil
}

func (con *Console) periodicSet(r *http.Request, role admin.Role) (any, error) {
	name := r.PathValue("name")
	var s periodic.Schedule
	if err := decodeBody(r, &s); err != nil {
		return nil, err
	}
	if err := con.knownTopic(r, s.Topic); err != nil {
		return nil, err
	}
	key, pair, _, err := con.readPeriodic(r, name)
	if err != nil {
		return nil, err
	}
	var index uint64
	if pair != nil {
		index = pair.ModifyIndex
	}
	if err := con.writePeriodic(r, key, name, s, index); err != nil {
		return nil, err
	}
	return con.periodicGet(r, role)
}

// knownTopic refuses a schedule's topic that no relay of the stage
// registered (nor Config.Topics lists): every slot of it would fail at
// the gate, and a typo would pass silently until then (issue 32). An
// empty topic is left to Schedule.Check.
func (con *Console) knownTopic(r *http.Request, topic string) error {
	if topic == "" {
		return nil
	}
	topics, err := con.registered(r.Context())
	if err != nil {
		return con.redisErr(err)
	}
	if slices.Contains(topics, topic) {
		return nil
	}
	return badRequest(fmt.Sprintf("topic %q: no relay of this stage relays it (its topics: %s)", topic, strings.Join(topics, ", ")),
		"check the spelling; a new topic needs its relay started first (a relay registers its topics when it starts), or listed in "+con.setting("Topics"))
}

func (con *Console) periodicDelete(r *http.Request, _ admin.Role) (any, error) {
	name := r.PathValue("name")
	key, pair, _, err := con.readExisting(r, name)
	if err != nil {
		return nil, err
	}
	wo := (&consulapi.WriteOptions{}).WithContext(r.Context())
	ok, _, err := con.kv().DeleteCAS(&consulapi.KVPair{Key: key, ModifyIndex: pair.ModifyIndex}, wo)
	if err != nil {
		return nil, con.consulErr(err)
	}
	if !ok {
		return nil, &admin.Error{Status: http.StatusConflict, Message: key + " changed while this request ran", Fix: "read it again and retry"}
	}
	// The state goes too: a schedule made again under this name counts
	// its slots from its creation, catching up nothing of the old one's.
	if err := con.pool.DeletePeriodicState(r.Context(), name); err != nil {
		return nil, con.redisErr(err)
	}
	return admin.PeriodicState{Name: name}, nil
}

// periodicChange applies change to a schedule that parses, by
// check-and-set: pause, resume, run-now.
func (con *Console) periodicChange(change func(*periodic.Schedule)) handlerFunc {
	return func(r *http.Request, role admin.Role) (any, error) {
		name := r.PathValue("name")
		key, pair, _, err := con.readExisting(r, name)
		if err != nil {
			return nil, err
		}
		p, err := periodic.Parse(name, pair.Value)
		if err != nil {
			return nil, badRequest("the schedule in Consul does not parse: "+err.Error(), "set it again: sluice periodic set "+name+" ...")
		}
		s := p.Schedule
		change(&s)
		if err := con.writePeriodic(r, key, name, s, pair.ModifyIndex); err != nil {
			return nil, err
		}
		return con.periodicGet(r, role)
	}
}

func (con *Console) periodicRunNow() handlerFunc {
	return con.periodicChange(func(s *periodic.Schedule) {
		// A new nonce each time: the scheduler fires once per nonce, with
		// the job id periodic:<name>:now:<nonce>.
		s.RunNow = strconv.FormatInt(con.cfg.Now().UnixNano(), 36)
	})
}
