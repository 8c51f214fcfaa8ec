// Against the real pipeline: sdk/integration/sdk_test.go starts `sluice
// dev` (with --http sdkts=<this test's handler> and a callback secret) and
// runs this file with the variables below. Without them it is skipped;
// the Go test makes sure it ran.

import assert from "node:assert/strict";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { AdminClient, callbackHandler, Client, jobHandler, Kill, RetryLater, serve, SluiceError, type Delivery } from "../../src/index.js";

const env = process.env;
const GATE = env.SLUICE_TEST_GATE ?? "";
const FLAKY = env.SLUICE_TEST_FLAKY_GATE ?? "";
const JOB_TYPE = env.SLUICE_TEST_JOB_TYPE ?? "";
const SECRET = env.SLUICE_TEST_CALLBACK_SECRET ?? "";
const ADMIN = env.SLUICE_TEST_ADMIN ?? "";
const ADMIN_TOKEN = env.SLUICE_TEST_ADMIN_TOKEN ?? "";

const deliveries = new Map<string, number[]>();

async function waitFor<T>(what: string, cond: () => Promise<T | false> | T | false, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const v = await cond();
    if (v) return v;
    await sleep(50);
  }
  assert.fail(`waited ${timeoutMs} ms for ${what}`);
}

/** fn's answer, or false while it throws a SluiceError of that status. */
async function unlessStatus<T>(status: number, fn: () => Promise<T>): Promise<T | false> {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof SluiceError && e.status === status) return false;
    throw e;
  }
}

interface Callback { group: string; total: number; done: number; dead: number; items: Array<{ index: number; state: string; result?: unknown; error?: string }> }

describe("against sluice dev", { skip: GATE ? false : "SLUICE_TEST_GATE unset: run by sdk/integration (go test ./sdk/integration)" }, () => {
  let handler: Server;
  before(async () => {
    handler = await serve(jobHandler(async (job: Delivery<{ n: number }>) => {
      deliveries.set(job.id, [...(deliveries.get(job.id) ?? []), job.attempt]);
      if (job.payload.n === 13) throw new Kill("13 is unlucky");
      if (job.payload.n === 7 && job.attempt === 1) throw new RetryLater("busy", { afterSeconds: 1 });
      return { double: job.payload.n * 2, text: "<ok> & fine" };
    }), { port: Number(env.SLUICE_TEST_HANDLER_PORT) });
  });
  after(() => new Promise<void>((r) => { handler.closeAllConnections(); handler.close(() => r()); }));

  it("enqueues, and the lookup shows the job done", async () => {
    const c = new Client(GATE);
    const res = await c.enqueue("jobs", "sdk.noop", { greeting: "<hi> & welcome" }, { retainMs: 3_600_000, priority: 2, tenant: "sdk" });
    assert.equal(res.topic, "jobs");
    const info = await waitFor("the job done", async () => {
      const i = await c.lookupJob("jobs", res.id, { partition: res.partition, offset: res.offset });
      return i.state === "done" && i;
    });
    assert.equal(info.id, res.id);
  });

  it("resends after a 504 with the same id, and the job runs once", async () => {
    const group = `ts504-${process.hrtime.bigint()}`;
    const res = await new Client(FLAKY).enqueue("jobs", JOB_TYPE, { n: 1 }, { group, retainMs: 3_600_000 });
    const sends = await (await fetch(`${FLAKY}/__sends?id=${res.id}`)).json();
    assert.equal(sends, 2, "the proxy ate the first answer: the client must have sent the job twice with its id");
    // A marker behind it in the same group (one Kafka partition, one lane).
    const marker = await new Client(GATE).enqueue("jobs", JOB_TYPE, { n: 2 }, { group });
    await waitFor("the marker delivered", () => deliveries.has(marker.id));
    assert.deepStrictEqual(deliveries.get(res.id), [1], "the resent job ran more than once");
  });

  it("runs a group through the http handler to a signed callback", async () => {
    let resolve!: (cb: Callback) => void;
    const got = new Promise<Callback>((r) => (resolve = r));
    const receiver = await serve(callbackHandler((cb: Callback) => resolve(cb), { secrets: [SECRET], v2Only: true }));
    try {
      const c = new Client(GATE);
      const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/done`;
      const g = await c.enqueueGroup("jobs", JOB_TYPE, Array.from({ length: 20 }, (_, n) => ({ n })), { callback: url, maxAttempts: 3 });
      assert.equal(g.count, 20);
      const cb = await Promise.race([got, sleep(45_000, undefined, { ref: false }).then(() => assert.fail("no callback within 45 s"))]);
      assert.deepStrictEqual([cb.group, cb.total, cb.done, cb.dead], [g.group, 20, 19, 1]);
      const items = new Map(cb.items.map((it) => [it.index, it]));
      assert.deepStrictEqual(items.get(3)?.result, { double: 6, text: "<ok> & fine" });
      assert.equal(items.get(13)?.state, "dead");
      assert.match(items.get(13)?.error ?? "", /13 is unlucky/);
      assert.deepStrictEqual(deliveries.get(`${g.group}.7`), [1, 2], "RetryLater: the worker tried item 7 again");
      assert.deepStrictEqual(deliveries.get(`${g.group}.13`), [1], "Kill: the worker did not retry item 13");
      const st = await c.groupStatus("jobs", g.group);
      assert.deepStrictEqual([st.state, st.done, st.dead], ["completed", 19, 1]);
      const ast = await new AdminClient(ADMIN, { token: ADMIN_TOKEN }).groupStatus(g.group, { topic: "jobs" });
      assert.deepStrictEqual([ast.group, ast.state, ast.total, ast.done, ast.dead], [g.group, "completed", 20, 19, 1]);
    } finally {
      receiver.closeAllConnections();
      receiver.close();
    }
  });

  it("creates a topic through the admin API, cancels a running job, lists and deletes", async () => {
    const a = new AdminClient(ADMIN, { token: ADMIN_TOKEN });
    const c = new Client(GATE);
    const topic = `sdkts-admin-${process.hrtime.bigint()}`;
    const kafka = [topic, `${topic}.retry`, `${topic}.dlq`].sort();
    const t = await a.createTopic(topic, { partitions: 2 });
    assert.ok(t.listed);
    assert.deepStrictEqual([...(t.created_kafka ?? [])].sort(), kafka);
    assert.ok((await a.listTopics()).some((x) => x.name === topic));
    // The gate learns the new Kafka topic when its catalog next reads
    // Kafka's metadata: a 404 until then.
    const slow = await waitFor("the gate to take the new topic", () => unlessStatus(404, () => c.enqueue(topic, "sleep", { ms: 120_000 }, { retainMs: 3_600_000 })));
    await waitFor("the slow job running", async () => (await a.lookupJob(topic, slow.id)).state === "running");
    const ch = await a.cancelJob(topic, slow.id);
    assert.deepStrictEqual([ch.was, ch.outcome], ["running", "cancel-requested"]);
    // Its worker learns it at its next lease extension (a third of the lease).
    await waitFor("the cancelled job", async () => (await a.lookupJob(topic, slow.id)).state === "cancelled");
    const later = await c.enqueue(topic, "sleep", { ms: 1 }, { delayMs: 3_600_000 });
    await waitFor("the delayed job in Redis", async () => (await a.lookupJob(topic, later.id)).state === "delayed");
    // limit 1: every job is a page of its own, so the listing pages.
    const listed: Record<string, string> = {};
    for await (const j of a.iterJobs(topic, { limit: 1 })) listed[j.id] = j.state;
    assert.deepStrictEqual(listed, { [slow.id]: "cancelled", [later.id]: "delayed" });
    const page = await a.listJobs(topic, { state: "delayed" });
    assert.deepStrictEqual([page.jobs.map((j) => j.id), page.next_cursor], [[later.id], undefined]);
    const del = await a.deleteJob(topic, later.id);
    assert.deepStrictEqual([del.was, del.outcome], ["delayed", "deleted"]);
    assert.equal((await a.lookupJob(topic, later.id)).state, "not-found");
    const d = await a.describeTopic(topic);
    assert.deepStrictEqual([d.queue?.ready, d.queue?.delayed, d.queue?.inflight], [0, 0, 0]);
    // A 409 while the relay has not committed every record it relayed.
    const gone = await waitFor("the topic deleted", () => unlessStatus(409, () => a.deleteTopic(topic)));
    assert.ok(gone.unlisted);
    assert.deepStrictEqual([...gone.deleted_kafka].sort(), kafka);
    assert.ok(!(await a.listTopics()).some((x) => x.name === topic && x.listed));
  });
});
