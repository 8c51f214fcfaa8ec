"""Verification of signed group callbacks (header Sluice-Signature), as the
Go client's VerifyCallback: docs/secure/callbacks.md#signatures and
sdk/testdata/signatures.json hold the contract.

    v2 = HMAC-SHA256(secret, "v2\\n<t>\\n<Sluice-Group>\\n<Sluice-Attempt>\\n<body>")
    v1 = HMAC-SHA256(secret, "<t>.<body>")          (sent during the transition)
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Mapping, Sequence

SIGNATURE_HEADER = "Sluice-Signature"
MIN_SECRET_LEN = 32
TOLERANCE = 300  # seconds a signature may be old or ahead


class SignatureError(Exception):
    """A callback that must not be acted on: answer 401."""


class NoSignature(SignatureError):
    def __init__(self) -> None:
        super().__init__(f"callback signature: missing or malformed {SIGNATURE_HEADER} header")


class BadSignature(SignatureError):
    def __init__(self) -> None:
        super().__init__("callback signature: no value matches a known secret")


class StaleSignature(SignatureError):
    def __init__(self) -> None:
        super().__init__("callback signature: timestamp outside the tolerance (a replay, or clocks apart)")


class NoV2Signature(SignatureError):
    def __init__(self) -> None:
        super().__init__("callback signature: no v2 value, and this receiver takes v2 only (the coordinator signs v1 alone, or a v2 was stripped)")


class ShortSecret(ValueError):
    """No secret, or one under 32 bytes: the receiver's configuration is
    wrong, whatever the callback (an unset environment variable reads as
    "")."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            (detail + ": " if detail else "")
            + f"callback secret: shorter than {MIN_SECRET_LEN} bytes, or none given (give the receiver the coordinator's "
            f"--callback-secret-file secret, at least {MIN_SECRET_LEN} bytes; `openssl rand -hex 32` makes one)"
        )


def _keys(secrets: Sequence[str | bytes]) -> list[bytes]:
    if isinstance(secrets, (str, bytes)):
        secrets = [secrets]
    keys = [s.encode() if isinstance(s, str) else bytes(s) for s in secrets]
    if not keys:
        raise ShortSecret()
    for i, k in enumerate(keys):
        if len(k) < MIN_SECRET_LEN:
            raise ShortSecret(f"secret {i + 1} of {len(keys)} is {len(k)} bytes")
    return keys


def _header(headers: Mapping[str, str], name: str) -> str:
    v = headers.get(name)
    if v is None:
        low = name.lower()
        v = next((val for k, val in headers.items() if k.lower() == low), "")
    return v


def verify_signature(
    header: str,
    body: bytes,
    *,
    group: str,
    attempt: str,
    secrets: Sequence[str | bytes],
    now: float | None = None,
    v2_only: bool = False,
) -> None:
    """Checks a Sluice-Signature value against the body, the Sluice-Group
    and Sluice-Attempt header values and the secrets (either of two during
    a rotation). A header with v2 values is checked by them only; one with
    v1 values only by v1, unless v2_only. Raises a SignatureError (or
    ShortSecret) on failure."""
    keys = _keys(secrets)
    ts = ""
    v1: list[bytes] = []
    v2: list[bytes] = []
    for part in header.split(","):
        k, sep, v = part.strip().partition("=")
        if not sep:
            raise NoSignature()
        if k == "t":
            ts = v
            continue
        try:
            b = bytes.fromhex(v)
        except ValueError:
            continue
        if k == "v1":
            v1.append(b)
        elif k == "v2":
            v2.append(b)
    if not ts.isdigit() or not (v1 or v2):
        raise NoSignature()
    if v2_only and not v2:
        raise NoV2Signature()
    if abs((time.time() if now is None else now) - int(ts)) > TOLERANCE:
        raise StaleSignature()
    for key in keys:
        if v2:
            msg = f"v2\n{ts}\n{group}\n{attempt}\n".encode() + body
            sigs = v2
        else:
            msg = ts.encode() + b"." + body
            sigs = v1
        want = hmac.new(key, msg, hashlib.sha256).digest()
        if any(hmac.compare_digest(s, want) for s in sigs):
            return
    raise BadSignature()


def verify_callback(
    headers: Mapping[str, str],
    body: bytes,
    secrets: Sequence[str | bytes],
    *,
    v2_only: bool = False,
    now: float | None = None,
) -> bytes:
    """Verifies a group callback from its request headers (any mapping;
    names are matched without regard to case) and body. Returns the body,
    to decode as the callback's JSON; raises SignatureError (answer 401,
    do not act on it) or ShortSecret. v2_only refuses a callback signed v1
    only, once every coordinator signs v2."""
    verify_signature(
        _header(headers, SIGNATURE_HEADER), body,
        group=_header(headers, "Sluice-Group"), attempt=_header(headers, "Sluice-Attempt"),
        secrets=secrets, now=now, v2_only=v2_only,
    )
    return body
