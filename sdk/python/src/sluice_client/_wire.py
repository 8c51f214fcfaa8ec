"""The gate's wire format: envelopes, durations, times and ids as the Go
client writes them (sdk/testdata/envelopes.json holds the contract)."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone
from typing import Any

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_id() -> str:
    """A ULID: 48 bits of milliseconds, 80 random bits, Crockford base 32.
    The client assigns one to every job it sends, so that a resend after a
    504 or a lost answer carries the same id and is queued once."""
    n = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    return "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1))


class Raw:
    """A payload that is JSON already: sent byte for byte, never decoded
    and re-encoded (the handler receives exactly these bytes)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | str) -> None:
        b = data.encode() if isinstance(data, str) else bytes(data)
        try:
            json.loads(b)
        except ValueError as e:
            raise ValueError(f"sluice: Raw payload is not valid JSON: {e}") from None
        self.data = b


def encode_payload(payload: Any) -> bytes | None:
    """JSON without escaping <, > and & or non-ASCII (as the Go client)."""
    if payload is None:
        return None
    if isinstance(payload, Raw):
        return payload.data
    if isinstance(payload, (bytes, bytearray)):
        return Raw(payload).data
    try:
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as e:
        raise ValueError(f"sluice: encoding the payload as JSON: {e}") from None


def _seconds_to_ns(d: float | timedelta, name: str) -> int:
    if isinstance(d, timedelta):
        ns = (d.days * 86400 + d.seconds) * 10**9 + d.microseconds * 1000
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        ns = round(d * 10**9)
    else:
        raise TypeError(f"sluice: {name} wants seconds (a number) or a timedelta, got {type(d).__name__}")
    if ns <= 0:
        raise ValueError(f"sluice: {name} must be positive, got {d!r}")
    return ns


def _frac(v: int, digits: int) -> str:
    whole, frac = divmod(v, 10**digits)
    if not frac:
        return str(whole)
    return f"{whole}.{frac:0{digits}d}".rstrip("0")


def go_duration(d: float | timedelta, name: str) -> str:
    """d (seconds, or a timedelta) as Go's time.Duration.String writes it:
    "10s", "1.5s", "250ms", "1h0m0s"; the gate reads that form."""
    u = _seconds_to_ns(d, name)
    if u < 1000:
        return f"{u}ns"
    if u < 10**6:
        return _frac(u, 3) + "µs"
    if u < 10**9:
        return _frac(u, 6) + "ms"
    secs, frac = divmod(u, 10**9)
    s = str(secs % 60) + (f".{frac:09d}".rstrip("0") if frac else "") + "s"
    mins = secs // 60
    if mins:
        s = f"{mins % 60}m" + s
        if mins // 60:
            s = f"{mins // 60}h" + s
    return s


def rfc3339(t: datetime) -> str:
    """t in UTC as Go's RFC3339Nano: fractional seconds without trailing
    zeros, "Z". A naive datetime is refused: its zone is a guess."""
    if t.tzinfo is None:
        raise ValueError("sluice: run_at is a naive datetime: give it a zone (datetime.now(timezone.utc))")
    t = t.astimezone(timezone.utc)
    s = t.strftime("%Y-%m-%dT%H:%M:%S")
    if t.microsecond:
        s += f".{t.microsecond:06d}".rstrip("0")
    return s + "Z"


def envelope(
    job_type: str,
    payload: Any,
    *,
    id: str | None,
    group: str | None,
    tenant: str | None,
    resource: str | None,
    priority: int | None,
    run_at: datetime | None,
    delay: float | timedelta | None,
    max_attempts: int | None,
    timeout: float | timedelta | None,
    idempotency_key: str | None,
    retain: float | timedelta | None,
) -> tuple[str, bytes]:
    """The job's envelope as the gate reads it, and its id (assigned when
    not given). Field order follows the Go client's encoder."""
    if not job_type:
        raise ValueError("sluice: a job needs a type")
    if run_at is not None and delay is not None:
        raise ValueError("sluice: give run_at or delay, not both")
    job_id = id or new_id()
    parts: list[bytes] = []

    def field(name: str, value: Any) -> None:
        parts.append(json.dumps(name).encode() + b":" + json.dumps(value, ensure_ascii=False).encode())

    field("id", job_id)
    field("type", job_type)
    for name, v in (("group", group), ("tenant", tenant), ("resource", resource)):
        if v:
            field(name, v)
    if priority:
        field("priority", int(priority))
    p = encode_payload(payload)
    if p is not None:
        parts.append(b'"payload":' + p)
    if idempotency_key:
        field("idempotency_key", idempotency_key)
    if max_attempts:
        field("max_attempts", int(max_attempts))
    if timeout is not None:
        field("timeout", go_duration(timeout, "timeout"))
    if retain is not None:
        field("retain", go_duration(retain, "retain"))
    if delay is not None:
        run_at = datetime.now(timezone.utc) + timedelta(seconds=_seconds_to_ns(delay, "delay") / 1e9)
    if run_at is not None:
        field("run_at", rfc3339(run_at))
    return job_id, b"{" + b",".join(parts) + b"}"


def group_fields(
    job_type: str,
    *,
    id: str,
    tenant: str | None,
    resource: str | None,
    priority: int | None,
    max_attempts: int | None,
    timeout: float | timedelta | None,
    callback: str | None,
) -> bytes:
    """The first line of a bulk group's NDJSON body."""
    f: dict[str, Any] = {"id": id, "type": job_type}
    if tenant:
        f["tenant"] = tenant
    if resource:
        f["resource"] = resource
    if priority:
        f["priority"] = int(priority)
    if callback:
        f["callback_url"] = callback
    if max_attempts:
        f["max_attempts"] = int(max_attempts)
    if timeout is not None:
        f["timeout"] = go_duration(timeout, "timeout")
    return json.dumps(f, ensure_ascii=False, separators=(",", ":")).encode()


def group_item(i: int, item: Any) -> bytes:
    """One item's line: its payload, null for None. A Raw item must hold no
    new line (NDJSON: one item per line)."""
    p = encode_payload(item)
    if p is None:
        return b"null"
    if b"\n" in p or b"\r" in p:
        raise ValueError(f"sluice: item {i}: a Raw item holds a new line; a group's body has one item per line (compact it)")
    return p
