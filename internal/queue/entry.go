package queue

import (
	"fmt"
	"strconv"
	"strings"
)

// An entry is how a plain job lives in Redis: no key of its own, but this
// string on its lane, in its batch's lease while claimed, in delayed while
// it waits:
//
//	"<attempts> <id> <lane> <envelope>"
//
// attempts counts the attempts made before (0 for a new job; a failed or
// reaped attempt adds one, a release or a deferral does not). Ids and lane
// names hold no spaces (the gate and the relay refuse them), so the first
// three fields split on single spaces and the envelope is the rest, byte
// for byte as read from Kafka.

// Entry builds a job's entry.
func Entry(attempts int, id, lane string, envelope []byte) string {
	var b strings.Builder
	b.Grow(24 + len(id) + len(lane) + len(envelope))
	b.WriteString(strconv.Itoa(attempts))
	b.WriteByte(' ')
	b.WriteString(id)
	b.WriteByte(' ')
	b.WriteString(lane)
	b.WriteByte(' ')
	b.Write(envelope)
	return b.String()
}

// ParsedEntry is an entry's fields.
type ParsedEntry struct {
	Attempts int
	ID       string
	Lane     string
	Envelope string
}

// ParseEntry splits an entry into its fields.
func ParseEntry(e string) (ParsedEntry, error) {
	a, rest, ok1 := strings.Cut(e, " ")
	id, rest, ok2 := strings.Cut(rest, " ")
	lane, env, ok3 := strings.Cut(rest, " ")
	n, err := strconv.Atoi(a)
	if !ok1 || !ok2 || !ok3 || err != nil || n < 0 || id == "" || lane == "" {
		return ParsedEntry{}, fmt.Errorf("malformed queue entry %.64q", e)
	}
	return ParsedEntry{Attempts: n, ID: id, Lane: lane, Envelope: env}, nil
}

// Lanes. The fair order serves lanes: a job with a group is in its group's
// lane; one without is in a shared lane of its partition, its tenant's when
// it names one, else its topic's, per priority class (a class is a weight,
// so it keeps a lane of its own). Kafka topic names hold no '/', and
// priorities are one digit, so a name reads back unambiguously:
//
//	g/<group>                      a group's lane
//	q/<topic>/<priority>           a topic's shared lane
//	t/<topic>/<priority>/<tenant>  a tenant's shared lane

// LaneOf is the lane of a job.
func LaneOf(group, tenant, topic string, priority int) string {
	if group != "" {
		return "g/" + group
	}
	if tenant != "" {
		return "t/" + topic + "/" + strconv.Itoa(priority) + "/" + tenant
	}
	return "q/" + topic + "/" + strconv.Itoa(priority)
}

// LaneInfo is what a lane's name tells.
type LaneInfo struct {
	Name string
	// Group is the group of a group lane, "" for a shared one.
	Group string
	// Topic and Weight (priority + 1) of a shared lane; a group lane's
	// are in its group hash.
	Topic  string
	Weight int
}

// ParseLane reads a lane's name.
func ParseLane(lane string) (LaneInfo, error) {
	kind, rest, _ := strings.Cut(lane, "/")
	switch kind {
	case "g":
		if rest != "" {
			return LaneInfo{Name: lane, Group: rest, Weight: 1}, nil
		}
	case "q", "t":
		topic, rest, ok := strings.Cut(rest, "/")
		prio, tenant, _ := strings.Cut(rest, "/")
		p, err := strconv.Atoi(prio)
		if ok && err == nil && p >= 0 && topic != "" && (kind == "q") == (tenant == "") {
			return LaneInfo{Name: lane, Topic: topic, Weight: p + 1}, nil
		}
	}
	return LaneInfo{}, fmt.Errorf("malformed lane name %q", lane)
}

// appendLaneKeys appends the keys a script names for each lane: its list,
// its meta hash (the group's hash, or the partition's shared hash) and its
// group's results (the shared hash again for a shared lane, unused).
func (k Keys) appendLaneKeys(dst []string, lanes ...LaneInfo) []string {
	for _, l := range lanes {
		if l.Group != "" {
			dst = append(dst, k.Lane(l.Name), k.Group(l.Group), k.Results(l.Group))
		} else {
			dst = append(dst, k.Lane(l.Name), k.Shared(), k.Shared())
		}
	}
	return dst
}

// appendLaneArgs appends each lane's ARGV fields for luaLanes: name, group
// ("" shared), weight. A lane's topic is its queue's, which each script
// takes once.
func appendLaneArgs(dst []any, lanes ...LaneInfo) []any {
	for _, l := range lanes {
		dst = append(dst, l.Name, l.Group, l.Weight)
	}
	return dst
}

// luaLanes reads lane specs from ARGV and KEYS: lanes[i] and byName[name]
// hold {name, group, weight, topic, list, meta, results}. keyBase + 3i-2..
// are lane i's keys (appendLaneKeys), argBase + 3i-2.. its fields
// (appendLaneArgs); topic is the queue's, every lane's.
// A group lane's weight is read from its hash when needed.
const luaLanes = `
local function readLanes(count, keyBase, argBase, topic)
  local lanes, byName = {}, {}
  for i = 1, count do
    local a = argBase + 3*(i-1)
    local l = {i = i, name = ARGV[a+1], group = ARGV[a+2], weight = tonumber(ARGV[a+3]), topic = topic,
      list = KEYS[keyBase+3*i-2], meta = KEYS[keyBase+3*i-1], results = KEYS[keyBase+3*i]}
    lanes[i] = l
    byName[l.name] = l
  end
  return lanes, byName
end
-- Puts a lane into the fair order if it is not there: at the partition's
-- virtual clock, or where its own last service ended if later (no credit
-- for idling). vt is read once per call through the cache table.
local function activate(l, lanesKey, vtKey, sharedKey, cache)
  if redis.call('ZSCORE', lanesKey, l.name) then return end
  if not cache.vt then cache.vt = tonumber(redis.call('GET', vtKey) or '0') end
  local vf
  if l.group ~= '' then vf = redis.call('HGET', l.meta, 'vfinish') else vf = redis.call('HGET', sharedKey, l.name) end
  redis.call('ZADD', lanesKey, math.max(cache.vt, tonumber(vf or '0')), l.name)
end
-- An entry's fields: attempts, id, lane; and the entry with its attempts
-- set to n.
local function entryHead(e)
  local a, id, lane = string.match(e, '^(%d+) (%S+) (%S+) ')
  return tonumber(a), id, lane
end
local function withAttempts(e, n)
  local head = string.match(e, '^%d+')
  return n .. string.sub(e, #head + 1)
end
`
