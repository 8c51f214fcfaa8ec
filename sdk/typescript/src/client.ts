// The client of the gate's HTTP API, with the Go client's retry rules
// (docs/client.md#retries-and-what-they-guarantee, sdk/testdata/answers.json).

import { setTimeout as sleep } from "node:timers/promises";
import { SluiceConnectionError, SluiceError, type ErrorBody } from "./errors.js";
import { envelope, groupFields, groupItem, newId, type GroupOptions, type JobOptions } from "./wire.js";

/**
 * Bounds the retries of one call: at most maxAttempts sends (1 turns
 * retries off), waiting minBackoffMs after the first failed send, doubling
 * up to maxBackoffMs, ±20%. A 503's Retry-After is waited for when longer
 * (up to maxBackoffMs). The Go client's defaults: about 20 s in all.
 */
export interface RetryPolicy {
  maxAttempts?: number;
  minBackoffMs?: number;
  maxBackoffMs?: number;
}

export interface ClientOptions {
  /** The gate's base URL (sluice dev's: http://127.0.0.1:8080). */
  url: string;
  /** Sent as "Authorization: Bearer <token>". Default: none. */
  token?: string;
  retry?: RetryPolicy;
  /** Bounds each send. Default: 30 s. */
  timeoutMs?: number;
  /** The fetch to send with. Default: the global fetch. */
  fetch?: typeof fetch;
}

export type Acks = "all" | "leader";

/** Where the gate stored an accepted job: durable in Kafka. */
export interface Result { id: string; topic: string; partition: number; offset: number }

/** One job of a batch. */
export interface Job extends JobOptions { type: string; payload?: unknown }

export interface ItemResult { index: number; status: number; id: string; partition: number; offset: number; error?: SluiceError }
export interface BatchResult { topic: string; accepted: number; rejected: number; results: ItemResult[] }

/** enqueueBatch's error when the gate took some jobs and not others: result has each job's outcome. */
export class BatchError extends SluiceError {
  readonly result: BatchResult;
  readonly rejected: ItemResult[];
  constructor(result: BatchResult) {
    const rejected = result.results.filter((r) => r.error);
    const first = rejected[0];
    super(first.error!.status, `${rejected.length} of ${result.results.length} jobs not accepted; job ${first.index}: ${first.error!.gateMessage}`, { field: first.error!.field });
    this.name = "BatchError";
    this.result = result;
    this.rejected = rejected;
  }
}

/** The gate's answer to a bulk group: every item (job "<group>.<i>") is in Kafka. */
export interface GroupResult { group: string; topic: string; count: number; status: string }

/** A bulk group's status (docs/groups.md); times are RFC 3339 strings. total is null until the group's size is known. */
export interface GroupStatus {
  group: string; topic: string; partition: number;
  state: "submitting" | "running" | "cancelling" | "completed";
  total: number | null; relayed: number; queued: number; running: number; done: number; failed: number; dead: number; cancelled: number;
  progress: number | null; rate: number;
  estimated_finish?: string; first_at: string | null; closed_at: string | null; cancelled_at: string | null; completed_at: string | null;
  callback_url?: string; callback_state?: string; callback_attempts?: number; callback_error?: string;
  [k: string]: unknown;
}

/** The admin API's answer to a group's cancel: its status after, and the ready jobs the cancel removed. */
export interface GroupCancelled extends GroupStatus { removed: number }

/**
 * Where a job is (docs/gate.md); "not-found" is an answer, not an error.
 * Times are RFC 3339 strings: until is a running job's lease deadline, a
 * delayed job's due time, when a dead or done job ended.
 */
export interface JobInfo {
  topic: string; id: string; redis_partition: number;
  state: "in-kafka" | "ready" | "running" | "delayed" | "dead" | "done" | "cancelled" | "rate-paused" | "not-found";
  relayed?: boolean; attempts?: number; last_error?: string; result?: string;
  worker?: string; since?: string; batch?: string; until?: string; why?: string; note?: string;
  [k: string]: unknown;
}

export type Rule = (status: number, eb: ErrorBody | undefined) => boolean;
const temporary: Rule = (s) => s === 503 || s === 504;
export const only503: Rule = (s) => s === 503;

interface Answer { status: number; body: string; retryAfterMs: number; sends: number }

export interface Exchange {
  method: string;
  path: string;
  body?: string;
  headers?: Record<string, string>;
  retryable: Rule;
  /** A lost answer may be resent: every job in the request carries the client's id. */
  retryTransport: boolean;
  maxSends?: number;
}

function connectionNeverMade(e: unknown): boolean {
  const code = (e as { cause?: { code?: string } })?.cause?.code;
  return code === "ECONNREFUSED" || code === "ENOTFOUND" || code === "EAI_AGAIN";
}

/** What an HTTP API's client says of itself: who answers, in errors. */
interface ApiName {
  api: string;
  urlExample: string;
  /** The fix of a 404 that is not the API's. */
  notApiFix?: string;
}

/** Sends requests to one HTTP API with the retry rules: the gate's (Client) or the admin API's (AdminClient). */
export class HttpApi {
  readonly url: string;
  protected readonly retry: Required<RetryPolicy>;
  private readonly token?: string;
  private readonly timeoutMs: number;
  private readonly fetch: typeof fetch;
  private readonly name: ApiName;

  protected constructor(o: ClientOptions | string, name: ApiName) {
    const opts: ClientOptions = typeof o === "string" ? { url: o } : o;
    this.name = name;
    let u: URL;
    try {
      u = new URL(opts.url);
    } catch {
      throw new TypeError(`sluice: url ${JSON.stringify(opts.url)}: want ${name.urlExample}`);
    }
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new TypeError(`sluice: url ${opts.url}: want http:// or https://`);
    this.url = opts.url.replace(/\/+$/, "");
    this.token = opts.token;
    const r = opts.retry ?? {};
    const min = r.minBackoffMs && r.minBackoffMs > 0 ? r.minBackoffMs : 100;
    this.retry = { maxAttempts: r.maxAttempts && r.maxAttempts > 0 ? r.maxAttempts : 10, minBackoffMs: min, maxBackoffMs: Math.max(r.maxBackoffMs && r.maxBackoffMs > 0 ? r.maxBackoffMs : 5000, min) };
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    this.fetch = opts.fetch ?? fetch;
  }

  protected backoff(attempt: number, retryAfterMs = 0): number {
    const d = Math.min(this.retry.minBackoffMs * 2 ** (attempt - 1), this.retry.maxBackoffMs) * (0.8 + Math.random() * 0.4);
    return Math.min(Math.max(d, retryAfterMs), this.retry.maxBackoffMs);
  }

  private async once(x: Exchange): Promise<{ status: number; body: string; retryAfterMs: number }> {
    const headers: Record<string, string> = { ...x.headers };
    // A change carries it even without a body: the admin API refuses a
    // change with neither it nor a token (a page of another site could send one).
    if ((x.body !== undefined || (x.method !== "GET" && x.method !== "HEAD")) && !headers["Content-Type"]) headers["Content-Type"] = "application/json";
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    const resp = await this.fetch(this.url + x.path, { method: x.method, headers, body: x.body, signal: AbortSignal.timeout(this.timeoutMs), redirect: "manual" });
    const body = await resp.text();
    const ra = Number.parseInt(resp.headers.get("Retry-After") ?? "", 10);
    return { status: resp.status, body, retryAfterMs: ra > 0 ? ra * 1000 : 0 };
  }

  protected async do(x: Exchange): Promise<Answer> {
    const bound = Math.min(this.retry.maxAttempts, x.maxSends ?? Infinity);
    for (let attempt = 1; ; attempt++) {
      let a: { status: number; body: string; retryAfterMs: number };
      try {
        a = await this.once(x);
      } catch (e) {
        if (!(x.retryTransport || connectionNeverMade(e)) || attempt >= bound) {
          const cause = (e as { cause?: unknown }).cause ?? e;
          throw new SluiceConnectionError(`sluice: ${x.method} ${x.path}: ${attempt} sends: ${String((cause as Error)?.message ?? cause)}`, { cause: e });
        }
        await sleep(this.backoff(attempt));
        continue;
      }
      let eb: ErrorBody | undefined;
      if (a.status >= 300) {
        try {
          const v = JSON.parse(a.body);
          eb = v && typeof v === "object" && !Array.isArray(v) ? v : {};
        } catch {
          eb = {}; // a proxy's page: the message falls back to the body
        }
      }
      if (!x.retryable(a.status, eb) || attempt >= bound) {
        if (eb && a.status >= 400 && !("results" in eb)) throw SluiceError.fromBody(a.status, eb, a.body, attempt, this.name.api, this.name.notApiFix);
        return { ...a, sends: attempt };
      }
      await sleep(this.backoff(attempt, a.retryAfterMs));
    }
  }
}

/** Talks to one gate (or a load balancer in front of several). */
export class Client extends HttpApi {
  constructor(o: ClientOptions | string) {
    super(o, { api: "gate", urlExample: "the gate's base URL, like http://127.0.0.1:8080" });
  }

  private static topic(topic: string): string {
    return "/v1/topics/" + encodeURIComponent(topic);
  }

  private static acks(acks?: Acks): Record<string, string> {
    if (acks === undefined) return {};
    if (acks !== "all" && acks !== "leader") throw new TypeError(`sluice: acks ${JSON.stringify(acks)}: want "all" or "leader"`);
    return { "Sluice-Acks": acks };
  }

  /**
   * Sends one job (POST /v1/topics/{topic}/jobs); resolves once Kafka
   * holds it. payload is any JSON value, a Raw sent as it is, or
   * undefined. A 503, a 504 or a lost answer is resent with the same id
   * (assigned here when not given), so the job is queued once; a 4xx
   * throws a SluiceError.
   */
  async enqueue(topic: string, type: string, payload?: unknown, options: JobOptions & { acks?: Acks } = {}): Promise<Result> {
    const { acks, ...o } = options;
    const { body } = envelope(type, payload, o);
    const a = await this.do({ method: "POST", path: Client.topic(topic) + "/jobs", body, headers: Client.acks(acks), retryable: temporary, retryTransport: true });
    const r = JSON.parse(a.body);
    return { id: r.id, topic: r.topic, partition: r.partition, offset: r.offset };
  }

  /**
   * Sends jobs in one request (POST /v1/topics/{topic}/jobs:batch, at most
   * the gate's --max-batch-jobs, 1000 by default). The jobs answered 503
   * or 504 are resent alone, with their ids. Throws a BatchError (with the
   * result) when some were not accepted; the others are stored.
   */
  async enqueueBatch(topic: string, jobs: Job[], options: { acks?: Acks } = {}): Promise<BatchResult> {
    if (jobs.length === 0) throw new TypeError("sluice: enqueueBatch: no jobs");
    const envs = jobs.map((j, i) => {
      const { type, payload, ...o } = j;
      try {
        return envelope(type, payload, o);
      } catch (e) {
        throw new TypeError(`sluice: job ${i}: ${(e as Error).message}`);
      }
    });
    const results: ItemResult[] = new Array(jobs.length);
    let pending = jobs.map((_, i) => i);
    let sent = 0;
    while (pending.length > 0) {
      const a = await this.do({
        method: "POST", path: Client.topic(topic) + "/jobs:batch", body: `[${pending.map((i) => envs[i].body).join(",")}]`,
        headers: Client.acks(options.acks),
        // An answer per job ("results") is sorted out here; a 503 or 504
        // for the whole request is resent by do.
        retryable: (s, eb) => temporary(s, eb) && !(eb && "results" in eb),
        retryTransport: true, maxSends: this.retry.maxAttempts - sent,
      });
      sent += a.sends;
      const items: Array<{ status: number; id?: string; partition?: number; offset?: number; error?: string; field?: string }> = JSON.parse(a.body).results ?? [];
      if (items.length !== pending.length) throw new SluiceError(a.status, `reading the gate's batch answer: ${items.length} results, want ${pending.length}`, { attempts: sent });
      const again: number[] = [];
      items.forEach((r, k) => {
        const i = pending[k];
        const item: ItemResult = { index: i, status: r.status, id: r.id || envs[i].id, partition: r.partition ?? 0, offset: r.offset ?? 0 };
        if (r.status !== 202) {
          item.error = new SluiceError(r.status, r.error ?? "", { field: r.field, attempts: sent });
          if (item.error.temporary && sent < this.retry.maxAttempts) again.push(i);
        }
        results[i] = item;
      });
      pending = again;
      if (pending.length > 0) await sleep(this.backoff(sent, a.retryAfterMs));
    }
    const out: BatchResult = { topic, accepted: results.filter((r) => !r.error).length, rejected: results.filter((r) => r.error).length, results };
    if (out.rejected > 0) throw new BatchError(out);
    return out;
  }

  /**
   * Submits a bulk group (POST /v1/topics/{topic}/groups, NDJSON): item i
   * becomes job "<group>.<i>" with items[i] as its payload; with callback,
   * the coordinator POSTs the results there once every job ended.
   * Retried: a 503 before the gate wrote anything, a connection never
   * made. Not retried: a 504, or a 503 halfway (the gate cancelled what it
   * wrote; the id takes no more jobs): submit under a new id.
   */
  async enqueueGroup(topic: string, type: string, items: unknown[], options: GroupOptions & { acks?: Acks } = {}): Promise<GroupResult> {
    if (!type) throw new TypeError("sluice: a group needs a job type");
    const { acks, ...o } = options;
    const id = o.id || newId();
    const lines = [groupFields(type, id, o), ...items.map((it, i) => groupItem(i, it))];
    const a = await this.do({
      method: "POST", path: Client.topic(topic) + "/groups", body: lines.join("\n") + "\n",
      headers: { "Content-Type": "application/x-ndjson", ...Client.acks(acks) },
      // A 503 with ids came after items were written (and cancelled).
      retryable: (s, eb) => s === 503 && eb !== undefined && !(eb.ids && eb.ids.length > 0),
      retryTransport: false,
    });
    const r = JSON.parse(a.body);
    return { group: r.group, topic: r.topic, count: r.count, status: r.status };
  }

  /** A bulk group's status (GET /v1/topics/{topic}/groups/{id}); unknown: a SluiceError 404. */
  async groupStatus(topic: string, group: string): Promise<GroupStatus> {
    const a = await this.do({ method: "GET", path: `${Client.topic(topic)}/groups/${encodeURIComponent(group)}`, retryable: only503, retryTransport: true });
    return JSON.parse(a.body);
  }

  /**
   * Where job id is (GET /v1/topics/{topic}/jobs/{id}): give its group and
   * its Kafka position (Result.partition, .offset) when known.
   */
  async lookupJob(topic: string, id: string, o: { group?: string; partition?: number; offset?: number } = {}): Promise<JobInfo> {
    const q = new URLSearchParams();
    if (o.group) q.set("group", o.group);
    if (o.partition !== undefined && o.offset !== undefined) {
      q.set("partition", String(o.partition));
      q.set("offset", String(o.offset));
    }
    const path = `${Client.topic(topic)}/jobs/${encodeURIComponent(id)}${q.size ? "?" + q : ""}`;
    try {
      const a = await this.do({ method: "GET", path, retryable: only503, retryTransport: true });
      return JSON.parse(a.body);
    } catch (e) {
      if (e instanceof SluiceError && e.status === 404 && e.body.state === "not-found") return e.body as unknown as JobInfo;
      throw e;
    }
  }
}
