"""Against the real pipeline: sdk/integration/sdk_test.go starts `sluice dev`
(with --http sdkpy=<this test's handler> and a callback secret) and runs
this file with the variables below (the admin API's URL and the admin
token dev generated among them). Without them it is skipped; the Go test
makes sure it ran."""

import json
import os
import threading
import time
import urllib.request

import pytest

from sluice_client import AdminClient, Client, Kill, RetryLater, SluiceError, callback_wsgi, serve, wsgi_handler

GATE = os.environ.get("SLUICE_TEST_GATE", "")
pytestmark = pytest.mark.skipif(not GATE, reason="SLUICE_TEST_GATE unset: run by sdk/integration (go test ./sdk/integration)")
FLAKY = os.environ.get("SLUICE_TEST_FLAKY_GATE", "")
JOB_TYPE = os.environ.get("SLUICE_TEST_JOB_TYPE", "")
HANDLER_PORT = int(os.environ.get("SLUICE_TEST_HANDLER_PORT", "0"))
SECRET = os.environ.get("SLUICE_TEST_CALLBACK_SECRET", "")
ADMIN = os.environ.get("SLUICE_TEST_ADMIN", "")
ADMIN_TOKEN = os.environ.get("SLUICE_TEST_ADMIN_TOKEN", "")

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
    ast = AdminClient(ADMIN, token=ADMIN_TOKEN).group_status(g.group, topic="jobs")
    assert (ast.group, ast.state, ast.total, ast.done, ast.dead) == (g.group, "completed", 20, 19, 1)


def unless_status(status, fn):
    """fn's answer, or None while it raises a SluiceError of that status."""
    try:
        return fn()
    except SluiceError as e:
        if e.status != status:
            raise
        return None


def test_admin_creates_a_topic_cancels_a_running_job_lists_and_deletes():
    a = AdminClient(ADMIN, token=ADMIN_TOKEN)
    c = Client(GATE)
    topic = f"sdkpy-admin-{time.time_ns()}"
    t = a.create_topic(topic, partitions=2)
    assert t.listed and sorted(t.created_kafka) == sorted([topic, topic + ".retry", topic + ".dlq"]), t
    assert topic in [x.name for x in a.list_topics()]
    # The gate learns the new Kafka topic when its catalog next reads
    # Kafka's metadata: a 404 until then.
    slow = wait_for("the gate to take the new topic",
                    lambda: unless_status(404, lambda: c.enqueue(topic, "sleep", {"ms": 120000}, retain=3600)))
    wait_for("the slow job running", lambda: a.lookup_job(topic, slow.id).state == "running")
    ch = a.cancel_job(topic, slow.id)
    assert (ch.was, ch.outcome) == ("running", "cancel-requested"), ch
    # Its worker learns it at its next lease extension (a third of the lease).
    info = wait_for("the cancelled job", lambda: (i := a.lookup_job(topic, slow.id)).state == "cancelled" and i)
    assert info.topic == topic
    later = c.enqueue(topic, "sleep", {"ms": 1}, delay=3600)
    wait_for("the delayed job in Redis", lambda: a.lookup_job(topic, later.id).state == "delayed")
    # limit=1: every job is a page of its own, so the listing pages.
    listed = {j.id: j.state for j in a.iter_jobs(topic, limit=1)}
    assert listed == {slow.id: "cancelled", later.id: "delayed"}, listed
    page = a.list_jobs(topic, state="delayed")
    assert [j.id for j in page.jobs] == [later.id] and page.next_cursor == ""
    ch = a.delete_job(topic, later.id)
    assert (ch.was, ch.outcome) == ("delayed", "deleted"), ch
    assert a.lookup_job(topic, later.id).state == "not-found"
    d = a.describe_topic(topic)
    assert d.queue is not None and (d.queue.ready, d.queue.delayed, d.queue.inflight) == (0, 0, 0), d
    # A 409 while the relay has not committed every record it relayed.
    gone = wait_for("the topic deleted", lambda: unless_status(409, lambda: a.delete_topic(topic)))
    assert gone.unlisted and sorted(gone.deleted_kafka) == sorted([topic, topic + ".retry", topic + ".dlq"]), gone
    assert topic not in [x.name for x in a.list_topics() if x.listed]
