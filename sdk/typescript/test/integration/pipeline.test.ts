// Against the real pipeline: sdk/integration/sdk_test.go starts `sluice
// dev` (with --http sdkts=<this test's handler> and a callback secret) and
// runs this file with the variables below. Without them it is skipped;
// the Go test makes sure it ran.

import assert from "node:assert/strict";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { callbackHandler, Client, jobHandler, Kill, RetryLater, serve, type Delivery } from "../../src/index.js";

const env = process.env;
const GATE = env.SLUICE_TEST_GATE ?? "";
const FLAKY = env.SLUICE_TEST_FLAKY_GATE ?? "";
const JOB_TYPE = env.SLUICE_TEST_JOB_TYPE ?? "";
const SECRET = env.SLUICE_TEST_CALLBACK_SECRET ?? "";

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
    } finally {
      receiver.closeAllConnections();
      receiver.close();
    }
  });
});
