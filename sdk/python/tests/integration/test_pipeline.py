"""Against the real pipeline: sdk/integration/sdk_test.go starts `sluice dev`
(with --http sdkpy=<this test's handler> and a callback secret) and runs
this file with the variables below. Without them it is skipped; the Go
test makes sure it ran."""

import json
import os
import threading
import time
import urllib.request

import pytest

from sluice_client import Client, Kill, RetryLater, callback_wsgi, serve, wsgi_handler

GATE = os.environ.get("SLUICE_TEST_GATE", "")
pytestmark = pytest.mark.skipif(not GATE, reason="SLUICE_TEST_GATE unset: run by sdk/integration (go test ./sdk/integration)")
FLAKY = os.environ.get("SLUICE_TEST_FLAKY_GATE", "")
JOB_TYPE = os.environ.get("SLUICE_TEST_JOB_TYPE", "")
HANDLER_PORT = int(os.environ.get("SLUICE_TEST_HANDLER_PORT", "0"))
SECRET = os.environ.get("SLUICE_TEST_CALLBACK_SECRET", "")

deliveries: dict[str, list[int]] = {}
lock = threading.Lock()


def handle(job):
    with lock:
        deliveries.setdefault(job.id, []).append(job.attempt)
    n = job.payload["n"]
    if n == 13:
        raise Kill("13 is unlucky")
    if n == 7 and job.attempt == 1:
        raise RetryLater("busy", after=1)
    return {"double": n * 2, "text": "<ok> & fine"}


@pytest.fixture(scope="module", autouse=True)
def job_handler():
    srv = serve(wsgi_handler(handle), "127.0.0.1", HANDLER_PORT)
    yield
    srv.shutdown()


def wait_for(what, cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    pytest.fail(f"waited {timeout}s for {what}")


def test_enqueue_then_lookup_shows_it_done():
    c = Client(GATE)
    res = c.enqueue("jobs", "sdk.noop", {"greeting": "<hi> & welcome"}, retain=3600, priority=2, tenant="sdk")
    assert res.topic == "jobs" and res.id
    info = wait_for("the job done", lambda: (i := c.lookup_job("jobs", res.id, partition=res.partition, offset=res.offset)).state == "done" and i)
    assert info.id == res.id


def test_a_504_is_resent_with_the_same_id_and_runs_once():
    c = Client(FLAKY)
    group = "py504-" + str(time.time_ns())
    res = c.enqueue("jobs", JOB_TYPE, {"n": 1}, group=group, retain=3600)
    sends = json.load(urllib.request.urlopen(f"{FLAKY}/__sends?id={res.id}"))
    assert sends == 2, "the proxy ate the first answer: the client must have sent the job twice with its id"
    # A marker behind it in the same group (one Kafka partition, one lane):
    # once it ran, a duplicate of the first would have been delivered.
    marker = Client(GATE).enqueue("jobs", JOB_TYPE, {"n": 2}, group=group)
    wait_for("the marker delivered", lambda: marker.id in deliveries)
    assert deliveries[res.id] == [1], "the resent job ran more than once"


def test_a_group_through_the_http_handler_to_a_signed_callback():
    got = []
    done = threading.Event()

    def on_callback(cb):
        got.append(cb)
        done.set()

    receiver = serve(callback_wsgi(on_callback, secrets=[SECRET], v2_only=True))
    try:
        c = Client(GATE)
        url = "http://127.0.0.1:%d/done" % receiver.server_address[1]
        g = c.enqueue_group("jobs", JOB_TYPE, [{"n": i} for i in range(20)], callback=url, max_attempts=3)
        assert g.count == 20
        assert done.wait(45), "no callback within 45 s"
    finally:
        receiver.shutdown()
    cb = got[0]
    assert (cb["group"], cb["total"], cb["done"], cb["dead"]) == (g.group, 20, 19, 1)
    items = {it["index"]: it for it in cb["items"]}
    assert items[3]["result"] == {"double": 6, "text": "<ok> & fine"}
    assert items[13]["state"] == "dead" and "13 is unlucky" in items[13]["error"]
    assert deliveries[f"{g.group}.7"] == [1, 2], "RetryLater: the worker tried item 7 again"
    assert deliveries[f"{g.group}.13"] == [1], "Kill: the worker did not retry item 13"
    st = c.group_status("jobs", g.group)
    assert (st.state, st.done, st.dead) == ("completed", 19, 1)
