package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/limits"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/scaling"
)

// The Consul-backed endpoints of docs/admin.md: relay rates, execution
// limits, scale pins. Values are checked with the readers' own parsers
// (internal/limits) before they are written, so the API cannot write what
// a relay or worker would refuse.

func (con *Console) key(parts ...string) (string, error) {
	k, err := consul.Key(con.cfg.Stage, parts...)
	if err != nil {
		return "", badRequest(err.Error(), "")
	}
	return k, nil
}

func (con *Console) kv() *consulapi.KV { return con.consul.KV() }

func rateState(topic string, value []byte, exists bool) (admin.RateState, error) {
	st := admin.RateState{Topic: topic}
	if !exists {
		st.Unlimited = true
		return st, nil
	}
	r, err := limits.ParseRate(value)
	if err != nil {
		return st, err
	}
	st.Rate, st.Burst, st.Paused = r.PerSecond, r.Burst, r.Paused
	return st, nil
}

func (con *Console) rateList(r *http.Request, _ admin.Role) (any, error) {
	prefix, err := con.key("relay")
	if err != nil {
		return nil, err
	}
	pairs, _, err := con.kv().List(prefix+"/", (&consulapi.QueryOptions{}).WithContext(r.Context()))
	if err != nil {
		return nil, con.consulErr(err)
	}
	out := admin.RateList{Rates: []admin.RateState{}}
	for _, p := range pairs {
		topic, ok := strings.CutSuffix(strings.TrimPrefix(p.Key, prefix+"/"), "/rate")
		if !ok || topic == "" || strings.Contains(topic, "/") {
			continue
		}
		st, err := rateState(topic, p.Value, true)
		if err != nil {
			// Shown, not hidden: the relay keeps its last good rate and
			// logs the same error.
			st.Error = err.Error()
		}
		out.Rates = append(out.Rates, st)
	}
	return out, nil
}

// readRate reads topic's rate key: the state and the key's modify index
// (0: absent), for a check-and-set write.
func (con *Console) readRate(r *http.Request, topic string) (string, admin.RateState, uint64, error) {
	key, err := con.key("relay", topic, "rate")
	if err != nil {
		return "", admin.RateState{}, 0, err
	}
	pair, _, err := con.kv().Get(key, (&consulapi.QueryOptions{}).WithContext(r.Context()))
	if err != nil {
		return "", admin.RateState{}, 0, con.consulErr(err)
	}
	if pair == nil {
		st, _ := rateState(topic, nil, false)
		return key, st, 0, nil
	}
	st, err := rateState(topic, pair.Value, true)
	if err != nil {
		st.Error = err.Error()
	}
	return key, st, pair.ModifyIndex, nil
}

func (con *Console) rateGet(r *http.Request, _ admin.Role) (any, error) {
	_, st, _, err := con.readRate(r, r.PathValue("topic"))
	return st, err
}

// writeRate writes (or, for unlimited, deletes) topic's rate if the key
// is still at index (0: absent): a concurrent change makes it a 409.
func (con *Console) writeRate(r *http.Request, key string, rate limits.Rate, index uint64) error {
	wo := (&consulapi.WriteOptions{}).WithContext(r.Context())
	var ok bool
	var err error
	if rate.Unlimited {
		if index == 0 {
			return nil
		}
		ok, _, err = con.kv().DeleteCAS(&consulapi.KVPair{Key: key, ModifyIndex: index}, wo)
	} else {
		if _, perr := limits.ParseRate(rate.Encode()); perr != nil {
			return badRequest(perr.Error(), "")
		}
		ok, _, err = con.kv().CAS(&consulapi.KVPair{Key: key, Value: rate.Encode(), ModifyIndex: index}, wo)
	}
	if err != nil {
		return con.consulErr(err)
	}
	if !ok {
		return &admin.Error{Status: http.StatusConflict, Message: key + " changed while this request ran", Fix: "read it again and retry"}
	}
	return nil
}

func (con *Console) rateSet(r *http.Request, _ admin.Role) (any, error) {
	topic := r.PathValue("topic")
	var body admin.RateSet
	if err := decodeBody(r, &body); err != nil {
		return nil, err
	}
	key, _, index, err := con.readRate(r, topic)
	if err != nil {
		return nil, err
	}
	rate := limits.Rate{PerSecond: body.Rate, Burst: body.Burst, Unlimited: body.Unlimited}
	switch {
	case body.Unlimited && (body.Rate != 0 || body.Burst != 0):
		return nil, badRequest("unlimited takes no rate or burst", "")
	case !body.Unlimited && !(body.Rate > 0):
		return nil, badRequest(fmt.Sprintf("rate %g: want jobs per second > 0 (or unlimited: true; pause with POST .../pause)", body.Rate), "")
	}
	if err := con.writeRate(r, key, rate, index); err != nil {
		return nil, err
	}
	_, st, _, err := con.readRate(r, topic)
	return st, err
}

func (con *Console) ratePause(r *http.Request, _ admin.Role) (any, error) {
	topic := r.PathValue("topic")
	key, st, index, err := con.readRate(r, topic)
	if err != nil {
		return nil, err
	}
	if st.Error != "" {
		return nil, badRequest("the rate in Consul does not parse: "+st.Error, "set it first: sluice rate set "+topic+" <rate>")
	}
	if !st.Paused {
		// The rate in force is kept in the value, for resume.
		if err := con.writeRate(r, key, limits.Rate{Paused: true, PerSecond: st.Rate, Burst: st.Burst}, index); err != nil {
			return nil, err
		}
	}
	_, st, _, err = con.readRate(r, topic)
	return st, err
}

func (con *Console) rateResume(r *http.Request, _ admin.Role) (any, error) {
	topic := r.PathValue("topic")
	key, st, index, err := con.readRate(r, topic)
	if err != nil {
		return nil, err
	}
	if st.Paused {
		// Back to what was in force before the pause; a pause of an
		// unlimited topic (or a bare "paused") resumes to unlimited.
		rate := limits.Rate{PerSecond: st.Rate, Burst: st.Burst, Unlimited: !(st.Rate > 0)}
		if err := con.writeRate(r, key, rate, index); err != nil {
			return nil, err
		}
	}
	_, st, _, err = con.readRate(r, topic)
	return st, err
}

// limitState is resource's limit as its key's value gives it; a value
// that does not parse is shown with its error.
func limitState(resource string, value []byte) admin.LimitState {
	st := admin.LimitState{Resource: resource}
	if l, err := limits.ParseLimit(value); err != nil {
		st.Error = err.Error()
	} else {
		st.Rate, st.Burst = l.PerSecond, l.Burst
	}
	return st
}

func (con *Console) limitList(r *http.Request, _ admin.Role) (any, error) {
	prefix, err := con.key("limits")
	if err != nil {
		return nil, err
	}
	pairs, _, err := con.kv().List(prefix+"/", (&consulapi.QueryOptions{}).WithContext(r.Context()))
	if err != nil {
		return nil, con.consulErr(err)
	}
	out := admin.LimitList{Limits: []admin.LimitState{}}
	for _, p := range pairs {
		res := strings.TrimPrefix(p.Key, prefix+"/")
		if res == "" || strings.Contains(res, "/") {
			continue
		}
		out.Limits = append(out.Limits, limitState(res, p.Value))
	}
	return out, nil
}

func (con *Console) limitGet(r *http.Request, _ admin.Role) (any, error) {
	res := r.PathValue("resource")
	key, err := con.key("limits", res)
	if err != nil {
		return nil, err
	}
	pair, _, err := con.kv().Get(key, (&consulapi.QueryOptions{}).WithContext(r.Context()))
	if err != nil {
		return nil, con.consulErr(err)
	}
	if pair == nil {
		return nil, notFound(fmt.Sprintf("resource %q has no limit (unlimited)", res), "set one: sluice limits set "+res+" <rate>")
	}
	return limitState(res, pair.Value), nil
}

func (con *Console) limitSet(r *http.Request, _ admin.Role) (any, error) {
	res := r.PathValue("resource")
	key, err := con.key("limits", res)
	if err != nil {
		return nil, err
	}
	var body admin.LimitState
	if err := decodeBody(r, &body); err != nil {
		return nil, err
	}
	if body.Resource != "" && body.Resource != res {
		return nil, badRequest(fmt.Sprintf("the body names resource %q, the path %q", body.Resource, res), "")
	}
	l := limits.Limit{PerSecond: body.Rate, Burst: body.Burst}
	if _, err := limits.ParseLimit(l.Encode()); err != nil {
		return nil, badRequest(err.Error(), "")
	}
	if _, err := con.kv().Put(&consulapi.KVPair{Key: key, Value: l.Encode()}, (&consulapi.WriteOptions{}).WithContext(r.Context())); err != nil {
		return nil, con.consulErr(err)
	}
	return admin.LimitState{Resource: res, Rate: l.PerSecond, Burst: l.Burst}, nil
}

func (con *Console) limitDelete(r *http.Request, _ admin.Role) (any, error) {
	res := r.PathValue("resource")
	key, err := con.key("limits", res)
	if err != nil {
		return nil, err
	}
	if _, err := con.kv().Delete(key, (&consulapi.WriteOptions{}).WithContext(r.Context())); err != nil {
		return nil, con.consulErr(err)
	}
	return map[string]any{"resource": res, "unlimited": true}, nil
}

// live sums a load's live heartbeats: workers and consumers.
func (con *Console) live(load queue.PartitionLoad) (workers, consumers int) {
	for _, b := range load.Consumers {
		if load.Now.Sub(b.At) <= con.cfg.ConsumerTTL {
			workers += b.Workers
			consumers++
		}
	}
	return workers, consumers
}

// readPins reads the pins from Consul (not the watch's copy: a write
// just made shows at once).
func (con *Console) readPins(r *http.Request) (map[int]admin.Pin, error) {
	prefix, err := scaling.PinsPrefix(con.cfg.Stage)
	if err != nil {
		return nil, badRequest(err.Error(), "")
	}
	pairs, _, err := con.kv().List(prefix, (&consulapi.QueryOptions{}).WithContext(r.Context()))
	if err != nil {
		return nil, con.consulErr(err)
	}
	values := map[string][]byte{}
	for _, p := range pairs {
		if name := strings.TrimPrefix(p.Key, prefix); name != "" {
			values[name] = p.Value
		}
	}
	pins, _ := scaling.ParsePins(values, con.cfg.Partitions)
	return pins, nil
}

func (con *Console) scaleList(r *http.Request, _ admin.Role) (any, error) {
	pins, err := con.readPins(r)
	if err != nil {
		return nil, err
	}
	out := admin.ScaleList{Holder: con.holds(), Partitions: []admin.ScalePartition{}}
	if con.cfg.Coordinator != nil {
		out.Params, out.ParamsFrom = con.cfg.Coordinator.Params().Wire(), admin.ParamsFromCoordinator
	} else {
		p, err := con.readParams(r)
		if err != nil {
			return nil, err
		}
		out.Params, out.ParamsFrom = p.Wire(), admin.ParamsFromConsul
	}
	for part := range con.cfg.Partitions {
		sp, err := con.scalePartition(r, part, pins)
		if err != nil {
			return nil, err
		}
		out.Partitions = append(out.Partitions, sp)
	}
	return out, nil
}

// readParams reads the scaling parameters as a coordinator would follow
// them, for a console without one in its process: the Consul value over
// the default parameters (the coordinator's flags, which this process
// does not know, may set others). A value that does not parse is a 409:
// the coordinators keep their last good parameters, which only they know.
func (con *Console) readParams(r *http.Request) (scaling.Params, error) {
	key, err := scaling.Key(con.cfg.Stage)
	if err != nil {
		return scaling.Params{}, badRequest(err.Error(), "")
	}
	pair, _, err := con.kv().Get(key, (&consulapi.QueryOptions{}).WithContext(r.Context()))
	if err != nil {
		return scaling.Params{}, con.consulErr(err)
	}
	if pair == nil {
		return scaling.DefaultParams(), nil
	}
	p, err := scaling.ParseParams(pair.Value, scaling.DefaultParams())
	if err != nil {
		return scaling.Params{}, &admin.Error{Status: http.StatusConflict, Message: err.Error(),
			Fix: "the coordinators ignore it and keep their last good parameters: correct " + key + " in Consul"}
	}
	return p, nil
}

func (con *Console) scalePartition(r *http.Request, part int, pins map[int]admin.Pin) (admin.ScalePartition, error) {
	load, err := con.pool.Load(r.Context(), part, nil, 10*con.cfg.ConsumerTTL) // workers only: no topic's depth
	if err != nil {
		return admin.ScalePartition{}, con.redisErr(err)
	}
	sp := admin.ScalePartition{Partition: part, Checkpoint: load.Checkpoint, Target: con.target(part)}
	sp.Workers, sp.Consumers = con.live(load)
	if pin, ok := pins[part]; ok {
		sp.Pin = &pin
	}
	return sp, nil
}

func (con *Console) scaleSet(r *http.Request, role admin.Role) (any, error) {
	part, err := strconv.Atoi(r.PathValue("partition"))
	if err != nil || part < 0 || part >= con.cfg.Partitions {
		return nil, badRequest(fmt.Sprintf("partition %q: want 0..%d", r.PathValue("partition"), con.cfg.Partitions-1), "")
	}
	var body admin.ScaleSet
	if err := decodeBody(r, &body); err != nil {
		return nil, err
	}
	prefix, _ := scaling.PinsPrefix(con.cfg.Stage)
	key := prefix + strconv.Itoa(part)
	wo := (&consulapi.WriteOptions{}).WithContext(r.Context())
	switch {
	case body.Auto && body.Workers != 0:
		return nil, badRequest("name workers or auto, not both", "")
	case body.Auto:
		if _, err := con.kv().Delete(key, wo); err != nil {
			return nil, con.consulErr(err)
		}
	case body.Workers < 1 || body.Workers > queue.MaxWorkers:
		return nil, badRequest(fmt.Sprintf("workers %d: want 1..%d (or auto: true)", body.Workers, queue.MaxWorkers), "")
	default:
		pin := admin.Pin{Workers: body.Workers, At: con.cfg.Now().UTC(), By: "admin API (" + role.String() + " token)"}
		v, _ := json.Marshal(pin)
		if _, err := scaling.ParsePin(v); err != nil {
			return nil, badRequest(err.Error(), "")
		}
		if _, err := con.kv().Put(&consulapi.KVPair{Key: key, Value: v}, wo); err != nil {
			return nil, con.consulErr(err)
		}
	}
	pins, err := con.readPins(r)
	if err != nil {
		return nil, err
	}
	return con.scalePartition(r, part, pins)
}
