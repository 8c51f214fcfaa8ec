"""The client of the gate's HTTP API, with the Go client's retry rules
(docs/client.md#retries-and-what-they-guarantee, sdk/testdata/answers.json)."""

from __future__ import annotations

import json
import random
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Literal, Sequence

from . import _wire
from ._errors import BatchError, SluiceConnectionError, SluiceError

Acks = Literal["all", "leader"]


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds the retries of one call: at most max_attempts sends (the
    first included; 1 turns retries off), waiting min_backoff after the
    first failed send, doubling up to max_backoff, spread by ±20%. A 503's
    Retry-After is waited for when longer (up to max_backoff). The
    defaults are the Go client's: about 20 s of waiting in all."""

    max_attempts: int = 10
    min_backoff: float = 0.1
    max_backoff: float = 5.0

    def backoff(self, attempt: int, retry_after: float = 0.0) -> float:
        d = min(self.min_backoff * 2 ** (attempt - 1), self.max_backoff)
        d *= 1 + random.uniform(-0.2, 0.2)
        return min(max(d, retry_after), max(self.max_backoff, self.min_backoff))


@dataclass
class Result:
    """Where the gate stored an accepted job: durable in Kafka."""

    id: str
    topic: str
    partition: int
    offset: int


@dataclass
class Job:
    """One job of a batch: its type, its payload and its envelope fields
    (the batch's acks is enqueue_batch's)."""

    type: str
    payload: Any = None
    id: str | None = None
    group: str | None = None
    tenant: str | None = None
    resource: str | None = None
    priority: int | None = None
    run_at: datetime | None = None
    delay: float | timedelta | None = None
    max_attempts: int | None = None
    timeout: float | timedelta | None = None
    idempotency_key: str | None = None
    retain: float | timedelta | None = None


@dataclass
class ItemResult:
    """One job's outcome in a batch: error is None when it was accepted."""

    index: int
    status: int
    id: str
    partition: int = 0
    offset: int = 0
    error: SluiceError | None = None


@dataclass
class BatchResult:
    topic: str
    accepted: int
    rejected: int
    results: list[ItemResult]


@dataclass
class GroupResult:
    """The gate's answer to a bulk group: every item (job "<group>.<i>")
    and the group's close record are in Kafka."""

    group: str
    topic: str
    count: int
    status: str


@dataclass
class GroupStatus:
    """A bulk group's status (docs/groups.md); raw holds every field the
    gate sent, those not named here included."""

    group: str
    topic: str
    state: str
    partition: int = 0
    total: int | None = None
    relayed: int = 0
    done: int = 0
    dead: int = 0
    cancelled: int = 0
    queued: int = 0
    running: int = 0
    failed: int = 0
    progress: float | None = None
    rate: float = 0.0
    callback_state: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class GroupCancelled(GroupStatus):
    """The admin API's answer to a group's cancel: its status after the
    cancel, and how many ready jobs the cancel removed."""

    removed: int = 0


@dataclass
class JobInfo:
    """Where a job is (docs/gate.md): state is in-kafka, ready, running,
    delayed, dead, done, cancelled, rate-paused or not-found (an answer,
    not an error). Times are RFC 3339 strings, as the API sends them:
    until is a running job's lease deadline, a delayed job's due time,
    when a dead or done job ended; why a delayed job's reason."""

    topic: str
    id: str
    state: str
    redis_partition: int = 0
    relayed: bool = False
    attempts: int = 0
    last_error: str = ""
    result: str = ""
    worker: str = ""
    since: str | None = None
    batch: str = ""
    until: str | None = None
    why: str = ""
    note: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


def _pick(cls: Any, d: dict[str, Any], **extra: Any) -> Any:
    names = set(cls.__dataclass_fields__)
    return cls(**{k: v for k, v in d.items() if k in names and k != "raw"}, **extra)


def _retry_after(v: str | None) -> float:
    try:
        s = int((v or "").strip())
    except ValueError:
        return 0.0
    return float(s) if s > 0 else 0.0


@dataclass
class _Answer:
    status: int
    body: bytes
    retry_after: float
    sends: int


# A retry rule: given the status and the error body (None for a 2xx),
# whether to send again.
_Rule = Callable[[int, "dict[str, Any] | None"], bool]


def _temporary(status: int, _eb: dict[str, Any] | None) -> bool:
    return status in (503, 504)


def _only_503(status: int, _eb: dict[str, Any] | None) -> bool:
    return status == 503


class _Http:
    """Sends requests to one HTTP API with the retry rules: the gate's
    (Client) or the admin API's (AdminClient)."""

    # Who answers, in errors; what a 404 that is not the API's means.
    _api = "gate"
    _not_api_fix = ""
    _url_example = "the gate's base URL, like http://127.0.0.1:8080"

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 30.0,
    ) -> None:
        u = urllib.parse.urlparse(url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ValueError(f"sluice: url {url!r}: want {self._url_example}")
        self.url = url.rstrip("/")
        self.token = token
        self.retry = retry or RetryPolicy()
        self.timeout = timeout

    def _once(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, bytes, float]:
        h = dict(headers)
        if body is not None or method not in ("GET", "HEAD"):
            # Even without a body: the admin API refuses a change that
            # carries neither this nor a token (a page of another site
            # could send it).
            h.setdefault("Content-Type", "application/json")
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, resp.read(), 0.0
        except urllib.error.HTTPError as e:
            with e:
                return e.code, e.read(), _retry_after(e.headers.get("Retry-After"))

    def _do(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        retryable: _Rule,
        retry_transport: bool,
        max_sends: int | None = None,
    ) -> _Answer:
        """Sends until an answer the rule does not retry, the attempts run
        out or a connection error it does not retry. A non-2xx answer it
        gives up on is raised as a SluiceError."""
        bound = self.retry.max_attempts if max_sends is None else min(self.retry.max_attempts, max_sends)
        attempt = 0
        while True:
            attempt += 1
            try:
                status, data, ra = self._once(method, path, body, headers or {})
            except (urllib.error.URLError, OSError) as e:
                reason = getattr(e, "reason", e)
                # A connection never made: the gate saw nothing, so any
                # request may be sent again. A lost answer (reset, timeout)
                # only when every job in it carries the client's id.
                never_made = isinstance(reason, (ConnectionRefusedError, socket.gaierror))
                if not (retry_transport or never_made) or attempt >= bound:
                    raise SluiceConnectionError(f"sluice: {method} {path}: {attempt} sends: {reason}") from e
                time.sleep(self.retry.backoff(attempt))
                continue
            eb: dict[str, Any] | None = None
            if status >= 300:
                try:
                    parsed = json.loads(data)
                    eb = parsed if isinstance(parsed, dict) else {}
                except ValueError:
                    eb = {}  # a proxy's page: the message falls back to the body
            if not retryable(status, eb) or attempt >= bound:
                if eb is not None and status >= 400 and "results" not in eb:
                    raise SluiceError.from_body(status, eb, data, attempt, self._api, self._not_api_fix)
                return _Answer(status, data, ra, attempt)
            time.sleep(self.retry.backoff(attempt, ra))


class Client(_Http):
    """Talks to one gate (or a load balancer in front of several); safe to
    share between threads.

    url is the gate's base URL (sluice dev's: http://127.0.0.1:8080);
    token, when set, is sent as "Authorization: Bearer <token>"; timeout
    bounds each send, in seconds.
    """

    @staticmethod
    def _topic(topic: str) -> str:
        return "/v1/topics/" + urllib.parse.quote(topic, safe="")

    @staticmethod
    def _acks(acks: Acks | None) -> dict[str, str]:
        if acks is None:
            return {}
        if acks not in ("all", "leader"):
            raise ValueError(f"sluice: acks {acks!r}: want 'all' or 'leader'")
        return {"Sluice-Acks": acks}

    # -- calls -----------------------------------------------------------

    def enqueue(
        self,
        topic: str,
        type: str,
        payload: Any = None,
        *,
        id: str | None = None,
        group: str | None = None,
        tenant: str | None = None,
        resource: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        max_attempts: int | None = None,
        timeout: float | timedelta | None = None,
        idempotency_key: str | None = None,
        retain: float | timedelta | None = None,
        acks: Acks | None = None,
    ) -> Result:
        """Sends one job (POST /v1/topics/{topic}/jobs) and returns once
        Kafka holds it. payload is any JSON value, Raw bytes sent as they
        are, or None. Durations are seconds (or timedeltas). A 503, a 504
        or a lost answer is resent with the same id (assigned here when
        not given), so the job is queued once; a 4xx raises SluiceError."""
        _, body = _wire.envelope(
            type, payload, id=id, group=group, tenant=tenant, resource=resource, priority=priority,
            run_at=run_at, delay=delay, max_attempts=max_attempts, timeout=timeout,
            idempotency_key=idempotency_key, retain=retain,
        )
        a = self._do("POST", self._topic(topic) + "/jobs", body=body, headers=self._acks(acks),
                     retryable=_temporary, retry_transport=True)
        return _pick(Result, json.loads(a.body))

    def enqueue_batch(self, topic: str, jobs: Sequence[Job], *, acks: Acks | None = None) -> BatchResult:
        """Sends jobs in one request (POST /v1/topics/{topic}/jobs:batch, at
        most the gate's --max-batch-jobs, 1000 by default). The gate takes
        or refuses each job on its own; the jobs answered 503 or 504 are
        resent alone, with their ids. Raises BatchError (carrying the
        result) when some jobs were not accepted; the others are stored."""
        if not jobs:
            raise ValueError("sluice: enqueue_batch: no jobs")
        ids: list[str] = []
        envs: list[bytes] = []
        for i, j in enumerate(jobs):
            try:
                jid, env = _wire.envelope(
                    j.type, j.payload, id=j.id, group=j.group, tenant=j.tenant, resource=j.resource,
                    priority=j.priority, run_at=j.run_at, delay=j.delay, max_attempts=j.max_attempts,
                    timeout=j.timeout, idempotency_key=j.idempotency_key, retain=j.retain,
                )
            except (ValueError, TypeError) as e:
                raise type(e)(f"sluice: job {i}: {e}") from None
            ids.append(jid)
            envs.append(env)
        results: list[ItemResult | None] = [None] * len(jobs)
        pending = list(range(len(jobs)))
        sent = 0
        while pending:
            body = b"[" + b",".join(envs[i] for i in pending) + b"]"
            a = self._do(
                "POST", self._topic(topic) + "/jobs:batch", body=body, headers=self._acks(acks),
                # An answer per job ("results") is sorted out here; a
                # 503 or 504 for the whole request is resent there.
                retryable=lambda s, eb: _temporary(s, eb) and not (eb is not None and "results" in eb),
                retry_transport=True, max_sends=self.retry.max_attempts - sent,
            )
            sent += a.sends
            ans = json.loads(a.body)
            items = ans.get("results") or []
            if len(items) != len(pending):
                raise SluiceError(a.status, f"reading the gate's batch answer: {len(items)} results, want {len(pending)}", attempts=sent)
            again: list[int] = []
            for k, r in enumerate(items):
                i = pending[k]
                item = ItemResult(index=i, status=r.get("status", 0), id=r.get("id") or ids[i],
                                  partition=r.get("partition", 0), offset=r.get("offset", 0))
                if item.status != 202:
                    item.error = SluiceError(item.status, r.get("error", ""), field=r.get("field", ""), attempts=sent)
                    if item.error.temporary and sent < self.retry.max_attempts:
                        again.append(i)
                results[i] = item
            pending = again
            if pending:
                time.sleep(self.retry.backoff(sent, a.retry_after))
        done = [r for r in results if r is not None]
        out = BatchResult(topic=topic, accepted=sum(r.error is None for r in done),
                          rejected=sum(r.error is not None for r in done), results=done)
        if out.rejected:
            raise BatchError(out)
        return out

    def enqueue_group(
        self,
        topic: str,
        type: str,
        items: Sequence[Any],
        *,
        id: str | None = None,
        tenant: str | None = None,
        resource: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        timeout: float | timedelta | None = None,
        callback: str | None = None,
        acks: Acks | None = None,
    ) -> GroupResult:
        """Submits a bulk group (POST /v1/topics/{topic}/groups, NDJSON):
        item i becomes job "<group>.<i>" with items[i] as its payload. With
        callback, the coordinator POSTs the group's results there once
        every job ended (verify it with verify_callback).

        Retried: a 503 before the gate wrote anything, and a connection
        never made. Not retried: a 504, or a 503 halfway through, after
        which the gate cancelled what it wrote and the id takes no more
        jobs; the SluiceError says so: submit under a new id."""
        if not type:
            raise ValueError("sluice: a group needs a job type")
        gid = id or _wire.new_id()
        lines = [_wire.group_fields(type, id=gid, tenant=tenant, resource=resource, priority=priority,
                                    max_attempts=max_attempts, timeout=timeout, callback=callback)]
        lines += [_wire.group_item(i, it) for i, it in enumerate(items)]
        body = b"\n".join(lines) + b"\n"
        headers = {"Content-Type": "application/x-ndjson", **self._acks(acks)}
        a = self._do("POST", self._topic(topic) + "/groups", body=body, headers=headers,
                     # A 503 with ids came after items were written (and
                     # cancelled); without, before any.
                     retryable=lambda s, eb: s == 503 and eb is not None and not eb.get("ids"),
                     retry_transport=False)
        return _pick(GroupResult, json.loads(a.body))

    def group_status(self, topic: str, group: str) -> GroupStatus:
        """A bulk group's status (GET /v1/topics/{topic}/groups/{id}). A
        group Redis does not know (yet, or any more) is a SluiceError with
        status 404."""
        path = self._topic(topic) + "/groups/" + urllib.parse.quote(group, safe="")
        a = self._do("GET", path, retryable=_only_503, retry_transport=True)
        d = json.loads(a.body)
        return _pick(GroupStatus, d, raw=d)

    def lookup_job(
        self, topic: str, id: str, *, group: str | None = None, partition: int | None = None, offset: int | None = None
    ) -> JobInfo:
        """Where job id is (GET /v1/topics/{topic}/jobs/{id}): give its group
        (which places it in its Redis partition) and its Kafka position
        (Result.partition and .offset) when known. Not found is an answer
        (state "not-found"), not an error."""
        q: dict[str, str] = {}
        if group:
            q["group"] = group
        if partition is not None and offset is not None:
            q["partition"], q["offset"] = str(partition), str(offset)
        path = self._topic(topic) + "/jobs/" + urllib.parse.quote(id, safe="")
        if q:
            path += "?" + urllib.parse.urlencode(q)
        try:
            a = self._do("GET", path, retryable=_only_503, retry_transport=True)
            d = json.loads(a.body)
        except SluiceError as e:
            if e.status == 404 and e.body.get("state") == "not-found":
                d = e.body
            else:
                raise
        return _pick(JobInfo, d, raw=d)
