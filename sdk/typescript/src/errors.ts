import { STATUS_CODES } from "node:http";

/** The gate's (or the admin API's) error body. */
export interface ErrorBody {
  error?: string;
  fix?: string;
  field?: string;
  line?: number;
  column?: number;
  ids?: string[];
  [k: string]: unknown;
}

/**
 * A gate's (or the admin API's) error answer the client throws rather than
 * retries: a 4xx (fix the request: message says how, field names the
 * envelope field at fault; the admin API adds fix), or a 503 or 504 still
 * failing after the retry policy's sends. ids are the jobs (or the group)
 * whose fate is unknown after a 504. api names who answered: "gate" or
 * "admin API".
 */
export class SluiceError extends Error {
  readonly status: number;
  readonly field: string;
  readonly line: number;
  readonly column: number;
  readonly ids: string[];
  readonly attempts: number;
  readonly body: ErrorBody;
  /** The API's message, which says what to fix (the name is older than the admin client). */
  readonly gateMessage: string;
  /** The admin API's fix: what to change ("" when none was given). */
  readonly fix: string;
  readonly api: string;

  constructor(status: number, message: string, o: { field?: string; line?: number; column?: number; ids?: string[]; attempts?: number; body?: ErrorBody; fix?: string; api?: string } = {}) {
    const attempts = o.attempts ?? 1;
    const api = o.api ?? "gate";
    super(`sluice ${api}: ${status} ${STATUS_CODES[status] ?? ""}: ${message}${o.fix ? ` (fix: ${o.fix})` : ""}${attempts > 1 ? ` (after ${attempts} sends)` : ""}`);
    this.name = "SluiceError";
    this.status = status;
    this.gateMessage = message;
    this.fix = o.fix ?? "";
    this.api = api;
    this.field = o.field ?? "";
    this.line = o.line ?? 0;
    this.column = o.column ?? 0;
    this.ids = o.ids ?? [];
    this.attempts = attempts;
    this.body = o.body ?? {};
  }

  /** Sending the same request later may succeed (Kafka unreachable or slow). */
  get temporary(): boolean {
    return this.status === 503 || this.status === 504;
  }

  static fromBody(status: number, eb: ErrorBody, raw: string, attempts: number, api = "gate", notApiFix = ""): SluiceError {
    let fix = eb.fix ?? "";
    // Not the API answering (a proxy's page, a coordinator without its
    // console): the body is the message.
    if (!eb.error && status === 404 && !fix) fix = notApiFix;
    return new SluiceError(status, eb.error || raw.trim(), { field: eb.field, line: eb.line, column: eb.column, ids: eb.ids, attempts, body: eb, fix, api });
  }
}

/**
 * The gate (or the admin API) could not be reached, or its answer was lost,
 * and the client gave up: after its retries, or at once where a resend is
 * not safe (a bulk group, or an admin change, whose answer was lost).
 */
export class SluiceConnectionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "SluiceConnectionError";
  }
}
