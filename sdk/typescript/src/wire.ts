// The gate's wire format: envelopes, durations, times and ids as the Go
// client writes them (sdk/testdata/envelopes.json holds the contract).

import { randomBytes } from "node:crypto";

const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/**
 * A ULID: 48 bits of milliseconds, 80 random bits, Crockford base 32. The
 * client assigns one to every job it sends, so that a resend after a 504
 * or a lost answer carries the same id and is queued once.
 */
export function newId(): string {
  let n = (BigInt(Date.now()) << 80n) | BigInt("0x" + randomBytes(10).toString("hex"));
  let s = "";
  for (let i = 0; i < 26; i++) {
    s = CROCKFORD[Number(n & 31n)] + s;
    n >>= 5n;
  }
  return s;
}

/** A payload that is JSON already: sent byte for byte, never re-encoded. */
export class Raw {
  readonly text: string;
  constructor(json: string | Uint8Array) {
    const text = typeof json === "string" ? json : new TextDecoder().decode(json);
    try {
      JSON.parse(text);
    } catch (e) {
      throw new TypeError(`sluice: Raw payload is not valid JSON: ${(e as Error).message}`);
    }
    this.text = text;
  }
}

/** JSON of a payload (no escaping of < > &, as the Go client); undefined for none. */
export function encodePayload(payload: unknown): string | undefined {
  if (payload === undefined || payload === null) return undefined;
  if (payload instanceof Raw) return payload.text;
  if (payload instanceof Uint8Array) return new Raw(payload).text;
  const s = JSON.stringify(payload);
  if (s === undefined) throw new TypeError("sluice: the payload does not encode as JSON");
  return s;
}

function frac(v: bigint, digits: number): string {
  const base = 10n ** BigInt(digits);
  const whole = v / base, f = v % base;
  if (f === 0n) return whole.toString();
  return `${whole}.${f.toString().padStart(digits, "0")}`.replace(/0+$/, "");
}

/** ms as Go's time.Duration.String writes it ("10s", "1.5s", "250ms", "1h0m0s"). */
export function goDuration(ms: number, name: string): string {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms <= 0) {
    throw new RangeError(`sluice: ${name} must be a positive number of milliseconds, got ${ms}`);
  }
  const u = BigInt(Math.round(ms * 1e6)); // nanoseconds
  if (u < 1000n) return `${u}ns`;
  if (u < 1_000_000n) return frac(u, 3) + "µs";
  if (u < 1_000_000_000n) return frac(u, 6) + "ms";
  const secs = u / 1_000_000_000n, f = u % 1_000_000_000n;
  let s = `${secs % 60n}` + (f ? `.${f.toString().padStart(9, "0")}`.replace(/0+$/, "") : "") + "s";
  const mins = secs / 60n;
  if (mins) {
    s = `${mins % 60n}m` + s;
    if (mins / 60n) s = `${mins / 60n}h` + s;
  }
  return s;
}

/** t in UTC as Go's RFC3339Nano: no trailing zeros in the fraction, "Z". */
export function rfc3339(t: Date): string {
  if (!(t instanceof Date) || Number.isNaN(t.getTime())) throw new TypeError("sluice: runAt is not a valid Date");
  return t.toISOString().replace(/\.?0+Z$/, "Z").replace(/\.Z$/, "Z");
}

/** A job's envelope fields, every one a named option. */
export interface JobOptions {
  /** The job's id, at most 128 bytes. Default: the client assigns a ULID. */
  id?: string;
  /** The job's group: the fairness and fan-in unit, and the Kafka key. Default: none. */
  group?: string;
  /** The job's tenant (its shared lane; the rate limit's fallback). Default: none. */
  tenant?: string;
  /** The key of its execution rate limit. Default: none (the tenant's, else the type's). */
  resource?: string;
  /** 0 to 9; a fair-share weight of priority + 1. Default: 0. */
  priority?: number;
  /** Run no earlier than this. Default: now. Not with delayMs. */
  runAt?: Date;
  /** Run this many ms after the call (run_at on the client's clock). Not with runAt. */
  delayMs?: number;
  /** Executions at most, 1 to 100. Default: the worker's --max-attempts (5). */
  maxAttempts?: number;
  /** One execution's bound in ms, at most 24 h. Default: the worker's --timeout (1m). */
  timeoutMs?: number;
  /** Run at most once per key within its TTL (24 h). Default: none. */
  idempotencyKey?: string;
  /** Keep the job's record and result this long after it ends, at most 30 days. */
  retainMs?: number;
}

/** The envelope's JSON, in the Go client's field order, and its id. */
export function envelope(type: string, payload: unknown, o: JobOptions = {}): { id: string; body: string } {
  if (!type) throw new TypeError("sluice: a job needs a type");
  if (o.runAt !== undefined && o.delayMs !== undefined) throw new TypeError("sluice: give runAt or delayMs, not both");
  const id = o.id || newId();
  const parts: string[] = [];
  const field = (k: string, v: unknown) => parts.push(`${JSON.stringify(k)}:${JSON.stringify(v)}`);
  field("id", id);
  field("type", type);
  if (o.group) field("group", o.group);
  if (o.tenant) field("tenant", o.tenant);
  if (o.resource) field("resource", o.resource);
  if (o.priority) field("priority", o.priority);
  const p = encodePayload(payload);
  if (p !== undefined) parts.push(`"payload":${p}`);
  if (o.idempotencyKey) field("idempotency_key", o.idempotencyKey);
  if (o.maxAttempts) field("max_attempts", o.maxAttempts);
  if (o.timeoutMs !== undefined) field("timeout", goDuration(o.timeoutMs, "timeoutMs"));
  if (o.retainMs !== undefined) field("retain", goDuration(o.retainMs, "retainMs"));
  let runAt = o.runAt;
  if (o.delayMs !== undefined) {
    goDuration(o.delayMs, "delayMs");
    runAt = new Date(Date.now() + o.delayMs);
  }
  if (runAt !== undefined) field("run_at", rfc3339(runAt));
  return { id, body: `{${parts.join(",")}}` };
}

/** A bulk group's fields (every item's job gets them). */
export interface GroupOptions {
  /** The group's id, at most 117 bytes; item i is job "<id>.<i>". Default: a ULID. */
  id?: string;
  tenant?: string;
  resource?: string;
  priority?: number;
  maxAttempts?: number;
  timeoutMs?: number;
  /** Where the coordinator POSTs the group's results once every job ended. */
  callback?: string;
}

/** The first line of a group's NDJSON body. */
export function groupFields(type: string, id: string, o: GroupOptions): string {
  const f: Record<string, unknown> = { id, type };
  if (o.tenant) f.tenant = o.tenant;
  if (o.resource) f.resource = o.resource;
  if (o.priority) f.priority = o.priority;
  if (o.callback) f.callback_url = o.callback;
  if (o.maxAttempts) f.max_attempts = o.maxAttempts;
  if (o.timeoutMs !== undefined) f.timeout = goDuration(o.timeoutMs, "timeoutMs");
  return JSON.stringify(f);
}

/** One item's line: its payload, null for none; a Raw item must hold no new line. */
export function groupItem(i: number, item: unknown): string {
  const p = encodePayload(item);
  if (p === undefined) return "null";
  if (/[\r\n]/.test(p)) throw new TypeError(`sluice: item ${i}: a Raw item holds a new line; a group's body has one item per line (compact it)`);
  return p;
}
