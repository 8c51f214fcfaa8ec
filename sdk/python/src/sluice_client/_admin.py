"""The client of the admin API (docs/admin.md) that `sluice console`, every
`sluice coordinator` and `sluice dev` serve under /api/v1/: a job's
lookup, listing, cancel and delete, a group's status and cancel, and the
topics. Its answers are internal/wire's and internal/admin's JSON
(sdk/testdata/admin.json holds an example of each)."""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Iterator

from ._client import GroupCancelled, GroupStatus, JobInfo, _Http, _only_503, _pick


@dataclass
class JobListing:
    """One job of a listing (GET /api/v1/jobs): state is running, ready,
    delayed, dead, done or cancelled (the last two: "retained" records);
    partition is its Redis partition. Times are RFC 3339 strings: until is
    a running job's lease deadline, a delayed job's due time, when a dead
    or retained job ended."""

    id: str
    state: str
    partition: int = 0
    lane: str = ""
    attempts: int = 0
    last_error: str = ""
    worker: str = ""
    since: str | None = None
    batch: str = ""
    until: str | None = None
    why: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class JobPage:
    """A page of a topic's jobs; next_cursor, when not empty, is the
    cursor of the next page (give it back with the same topic, state and
    partition), empty at the end."""

    topic: str
    jobs: list[JobListing]
    state: str = ""
    next_cursor: str = ""


@dataclass
class JobChange:
    """What a job's cancel or delete did: was is its state before,
    outcome one of cancelled, deleted, cancel-requested (running: its
    worker cancels it at its next lease extension)."""

    topic: str
    id: str
    redis_partition: int
    was: str
    outcome: str
    note: str = ""


@dataclass
class TopicQueue:
    """A topic's jobs per state, summed over its Redis partitions."""

    topic: str = ""
    ready: int = 0
    delayed: int = 0
    inflight: int = 0
    dead: int = 0
    completed: int = 0
    active_groups: int = 0


@dataclass
class TopicState:
    """A topic as the topics API shows it (docs/topics.md): listed (in the
    stage's topic list), registered (by a relay), Kafka's partitions and
    replication, which of <name>, <name>.retry, <name>.dlq Kafka has,
    the relay lock's holder, and problems with their fixes. queue only
    from describe_topic; created_kafka only from create_topic (the Kafka
    topics this call created)."""

    name: str
    listed: bool = False
    registered: bool = False
    partitions: int = 0
    replication: int = 0
    kafka: list[str] = field(default_factory=list)
    created: str | None = None
    relay: str = ""
    queue: TopicQueue | None = None
    problems: list[str] = field(default_factory=list)
    created_kafka: list[str] = field(default_factory=list)


@dataclass
class TopicDeleted:
    """What delete_topic did: the Kafka topics deleted, whether it left
    the stage's list and the relays' registry, and the jobs still in
    Redis (kept for workers that serve the topic)."""

    name: str
    deleted_kafka: list[str] = field(default_factory=list)
    unlisted: bool = False
    unregistered: bool = False
    left: int = 0


def _topic_state(d: dict[str, Any]) -> TopicState:
    t = _pick(TopicState, {k: v for k, v in d.items() if k != "queue"})
    if d.get("queue") is not None:
        t.queue = _pick(TopicQueue, d["queue"])
    return t


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _path(path: str, query: dict[str, Any]) -> str:
    q = {k: str(v) for k, v in query.items() if v is not None and v != ""}
    return path + ("?" + urllib.parse.urlencode(q) if q else "")


class AdminClient(_Http):
    """Talks to the admin API: `sluice console`'s, a coordinator's (its
    --listen, :8083) or sluice dev's (http://127.0.0.1:8083, the token in
    <dir>/admin-token). token is a console admin token (a read token
    does for the reads), sent as "Authorization: Bearer <token>".

    Reads retry a 503 (Redis, Consul or Kafka did not answer) and
    connection errors; changes retry a 503 and a connection never made,
    but not a lost answer: the change may have been made, and sent again
    it would answer 404 or 409. delete_topic does not retry a 503 either:
    it may have done part (the topic unlisted, its Kafka topics not yet
    deleted), and the message says which step failed. A 4xx raises
    SluiceError with the API's message and fix."""

    _api = "admin API"
    _not_api_fix = "is the URL a console's: sluice console, or sluice coordinator without --console=false?"
    _url_example = "the admin API's base URL (the console's), like http://127.0.0.1:8083"

    def _get(self, path: str) -> Any:
        return json.loads(self._do("GET", path, retryable=_only_503, retry_transport=True).body)

    def _change(self, method: str, path: str, body: Any = None, *, retry_503: bool = True) -> Any:
        data = None if body is None else json.dumps(body).encode()
        rule = _only_503 if retry_503 else (lambda _s, _eb: False)
        return json.loads(self._do(method, path, body=data, retryable=rule, retry_transport=False).body)

    @staticmethod
    def _job(topic: str, id: str) -> str:
        return f"/api/v1/topics/{_q(topic)}/jobs/{_q(id)}"

    # -- jobs ------------------------------------------------------------

    def lookup_job(
        self, topic: str, id: str, *, group: str | None = None, partition: int | None = None, offset: int | None = None
    ) -> JobInfo:
        """Where job id is (GET /api/v1/topics/{topic}/jobs/{id}), as the
        gate's lookup says it: give its group (which places it) and its
        Kafka position when known. Not found is an answer."""
        q: dict[str, Any] = {"group": group}
        if partition is not None and offset is not None:
            q["partition"], q["offset"] = partition, offset
        d = self._get(_path(self._job(topic, id), q))
        return _pick(JobInfo, d, raw=d)

    def list_jobs(
        self, topic: str, *, state: str | None = None, partition: int | None = None, limit: int | None = None,
        cursor: str | None = None,
    ) -> JobPage:
        """One page of topic's jobs (GET /api/v1/jobs): in one state
        (running, ready, delayed, dead, retained) or all of them, on one
        Redis partition or all, at most limit (1..1000; the API's default
        100), from cursor (the page before's next_cursor)."""
        d = self._get(_path("/api/v1/jobs", {"topic": topic, "state": state, "partition": partition, "limit": limit, "cursor": cursor}))
        jobs = [_pick(JobListing, j, raw=j) for j in d.get("jobs") or []]
        return JobPage(topic=d.get("topic", topic), jobs=jobs, state=d.get("state", ""), next_cursor=d.get("next_cursor", ""))

    def iter_jobs(
        self, topic: str, *, state: str | None = None, partition: int | None = None, limit: int | None = None
    ) -> Iterator[JobListing]:
        """Every job of list_jobs' pages, fetched one page at a time. A
        listing is a look, not a snapshot: a job that moves while it runs
        may show twice or not at all."""
        cursor = None
        while True:
            page = self.list_jobs(topic, state=state, partition=partition, limit=limit, cursor=cursor)
            yield from page.jobs
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def cancel_job(self, topic: str, id: str, *, group: str | None = None) -> JobChange:
        """Cancels one job (POST .../jobs/{id}/cancel, an admin token): a
        ready or delayed one now; a running one at its worker's next lease
        extension (outcome cancel-requested). A job that ended is a 409,
        one Redis does not hold a 404."""
        return _pick(JobChange, self._change("POST", _path(self._job(topic, id) + "/cancel", {"group": group})))

    def delete_job(self, topic: str, id: str, *, group: str | None = None) -> JobChange:
        """Deletes one job (DELETE .../jobs/{id}, an admin token): a ready
        or delayed one leaves its queue, a dead one is purged, an ended
        one's record removed. A running one is a 409: cancel it first."""
        return _pick(JobChange, self._change("DELETE", _path(self._job(topic, id), {"group": group})))

    # -- groups ----------------------------------------------------------

    def group_status(self, group: str, *, topic: str | None = None) -> GroupStatus:
        """A group's status (GET /api/v1/groups/{group}), the gate's
        answer. Without topic every topic's queues are looked in (a name
        two topics use is a 409); unknown: a 404."""
        d = self._get(_path("/api/v1/groups/" + _q(group), {"topic": topic}))
        return _pick(GroupStatus, d, raw=d)

    def cancel_group(self, group: str, *, topic: str | None = None) -> GroupCancelled:
        """Cancels a group (POST /api/v1/groups/{group}/cancel, an admin
        token): its ready jobs now (removed), its delayed ones when due;
        running ones finish. The answer is its status after."""
        d = self._change("POST", _path("/api/v1/groups/" + _q(group) + "/cancel", {"topic": topic}))
        return _pick(GroupCancelled, d, raw=d)

    # -- topics ----------------------------------------------------------

    def create_topic(self, name: str, *, partitions: int | None = None, replication: int | None = None) -> TopicState:
        """Creates a topic (POST /api/v1/topics, an admin token): what
        Kafka lacks of <name>, <name>.retry and <name>.dlq, then the
        stage's list, which relays and workers that follow it serve.
        Partitions and replication default to the console's. Listed
        already: a 409."""
        body: dict[str, Any] = {"name": name}
        if partitions:
            body["partitions"] = partitions
        if replication:
            body["replication"] = replication
        return _topic_state(self._change("POST", "/api/v1/topics", body))

    def list_topics(self) -> list[TopicState]:
        """Every topic of the stage (GET /api/v1/topics), by name."""
        return [_topic_state(t) for t in self._get("/api/v1/topics").get("topics") or []]

    def describe_topic(self, name: str) -> TopicState:
        """One topic with its queue's depth (GET /api/v1/topics/{name});
        unknown: a 404."""
        return _topic_state(self._get("/api/v1/topics/" + _q(name)))

    def delete_topic(self, name: str, *, force: bool = False) -> TopicDeleted:
        """Deletes a topic (DELETE /api/v1/topics/{name}, an admin token):
        out of the list, its Kafka topics deleted. A 409 while it holds
        jobs (in Kafka not yet relayed, or ready, delayed, running in
        Redis) or is not listed, unless force."""
        path = _path("/api/v1/topics/" + _q(name), {"force": "true" if force else None})
        return _pick(TopicDeleted, self._change("DELETE", path, retry_503=False))
