// The client of the admin API (docs/admin.md) that `sluice console`, every
// `sluice coordinator` and `sluice dev` serve under /api/v1/: a job's
// lookup, listing, cancel and delete, a group's status and cancel, and the
// topics. Its answers are internal/wire's and internal/admin's JSON
// (sdk/testdata/admin.json holds an example of each).

import { HttpApi, only503, type ClientOptions, type GroupCancelled, type GroupStatus, type JobInfo, type Rule } from "./client.js";

/**
 * One job of a listing (GET /api/v1/jobs): state is running, ready,
 * delayed, dead, done or cancelled (the last two: "retained" records);
 * partition is its Redis partition. Times are RFC 3339 strings: until is
 * a running job's lease deadline, a delayed job's due time, when a dead or
 * retained job ended.
 */
export interface JobListing {
  id: string; state: string; partition: number; attempts: number;
  lane?: string; last_error?: string; worker?: string; since?: string; batch?: string; until?: string; why?: string;
  [k: string]: unknown;
}

/** A page of a topic's jobs; next_cursor (absent at the end) asks for the next one. */
export interface JobPage { topic: string; state?: string; jobs: JobListing[]; next_cursor?: string }

/** What a job's cancel or delete did: was is its state before; outcome cancelled, deleted or cancel-requested. */
export interface JobChange {
  topic: string; id: string; redis_partition: number; was: string;
  outcome: "cancelled" | "deleted" | "cancel-requested"; note: string;
}

/** A topic's jobs per state, summed over its Redis partitions. */
export interface TopicQueue { topic: string; ready: number; delayed: number; inflight: number; dead: number; completed: number; active_groups: number }

/**
 * A topic as the topics API shows it (docs/topics.md). queue only from
 * describeTopic; created_kafka only from createTopic (the Kafka topics
 * this call created).
 */
export interface TopicState {
  name: string; listed: boolean; registered: boolean; partitions: number; replication: number;
  kafka: string[]; created?: string; relay?: string; queue?: TopicQueue; problems?: string[]; created_kafka?: string[];
}

/** What deleteTopic did; left counts the jobs still in Redis. */
export interface TopicDeleted { name: string; deleted_kafka: string[]; unlisted: boolean; unregistered: boolean; left: number }

export interface ListJobsOptions {
  /** running, ready, delayed, dead or retained; default: all of them. */
  state?: string;
  /** One Redis partition; default: all. */
  partition?: number;
  /** 1..1000 jobs a page; the API's default: 100. */
  limit?: number;
  /** The page before's next_cursor. */
  cursor?: string;
}

const never: Rule = () => false;

function q(s: string): string {
  return encodeURIComponent(s);
}

function withQuery(path: string, query: Record<string, string | number | undefined>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== "") p.set(k, String(v));
  return p.size ? `${path}?${p}` : path;
}

/**
 * Talks to the admin API: `sluice console`'s, a coordinator's (its
 * --listen, :8083) or sluice dev's (http://127.0.0.1:8083, the token in
 * <dir>/admin-token). token is a console admin token (a read token does
 * for the reads).
 *
 * Reads retry a 503 (Redis, Consul or Kafka did not answer) and connection
 * errors; changes retry a 503 and a connection never made, but not a lost
 * answer: the change may have been made, and sent again it would answer
 * 404 or 409. deleteTopic does not retry a 503 either: it may have done
 * part, and the message says which step failed. A 4xx throws a
 * SluiceError with the API's message and fix.
 */
export class AdminClient extends HttpApi {
  constructor(o: ClientOptions | string, opts: Omit<ClientOptions, "url"> = {}) {
    super(typeof o === "string" ? { ...opts, url: o } : o, {
      api: "admin API",
      urlExample: "the admin API's base URL (the console's), like http://127.0.0.1:8083",
      notApiFix: "is the URL a console's: sluice console, or sluice coordinator without --console=false?",
    });
  }

  private async get<T>(path: string): Promise<T> {
    return JSON.parse((await this.do({ method: "GET", path, retryable: only503, retryTransport: true })).body);
  }

  private async change<T>(method: string, path: string, body?: unknown, retryable: Rule = only503): Promise<T> {
    const b = body === undefined ? undefined : JSON.stringify(body);
    return JSON.parse((await this.do({ method, path, body: b, retryable, retryTransport: false })).body);
  }

  private static job(topic: string, id: string): string {
    return `/api/v1/topics/${q(topic)}/jobs/${q(id)}`;
  }

  /**
   * Where job id is (GET /api/v1/topics/{topic}/jobs/{id}), as the gate's
   * lookup says it: give its group and Kafka position when known.
   */
  lookupJob(topic: string, id: string, o: { group?: string; partition?: number; offset?: number } = {}): Promise<JobInfo> {
    const known = o.partition !== undefined && o.offset !== undefined;
    return this.get(withQuery(AdminClient.job(topic, id), { group: o.group, partition: known ? o.partition : undefined, offset: known ? o.offset : undefined }));
  }

  /** One page of topic's jobs (GET /api/v1/jobs). */
  listJobs(topic: string, o: ListJobsOptions = {}): Promise<JobPage> {
    return this.get(withQuery("/api/v1/jobs", { topic, state: o.state, partition: o.partition, limit: o.limit, cursor: o.cursor }));
  }

  /**
   * Every job of listJobs' pages, fetched one page at a time. A listing is
   * a look, not a snapshot: a job that moves meanwhile may show twice or
   * not at all.
   */
  async *iterJobs(topic: string, o: Omit<ListJobsOptions, "cursor"> = {}): AsyncGenerator<JobListing> {
    let cursor: string | undefined;
    do {
      const page = await this.listJobs(topic, { ...o, cursor });
      yield* page.jobs;
      cursor = page.next_cursor;
    } while (cursor);
  }

  /**
   * Cancels one job (POST .../jobs/{id}/cancel, an admin token): a ready or
   * delayed one now, a running one at its worker's next lease extension
   * (cancel-requested). Ended: a 409; not in Redis: a 404.
   */
  cancelJob(topic: string, id: string, o: { group?: string } = {}): Promise<JobChange> {
    return this.change("POST", withQuery(AdminClient.job(topic, id) + "/cancel", { group: o.group }));
  }

  /**
   * Deletes one job (DELETE .../jobs/{id}, an admin token): a ready or
   * delayed one leaves its queue, a dead one is purged, an ended one's
   * record removed. Running: a 409 (cancel it first).
   */
  deleteJob(topic: string, id: string, o: { group?: string } = {}): Promise<JobChange> {
    return this.change("DELETE", withQuery(AdminClient.job(topic, id), { group: o.group }));
  }

  /** A group's status (GET /api/v1/groups/{group}); without topic, every topic's queues are looked in. */
  groupStatus(group: string, o: { topic?: string } = {}): Promise<GroupStatus> {
    return this.get(withQuery(`/api/v1/groups/${q(group)}`, { topic: o.topic }));
  }

  /** Cancels a group (POST /api/v1/groups/{group}/cancel, an admin token): its status after, with removed. */
  cancelGroup(group: string, o: { topic?: string } = {}): Promise<GroupCancelled> {
    return this.change("POST", withQuery(`/api/v1/groups/${q(group)}/cancel`, { topic: o.topic }));
  }

  /**
   * Creates a topic (POST /api/v1/topics, an admin token): what Kafka lacks
   * of name, name.retry and name.dlq, then the stage's list. Listed
   * already: a 409.
   */
  createTopic(name: string, o: { partitions?: number; replication?: number } = {}): Promise<TopicState> {
    const body: Record<string, unknown> = { name };
    if (o.partitions) body.partitions = o.partitions;
    if (o.replication) body.replication = o.replication;
    return this.change("POST", "/api/v1/topics", body);
  }

  /** Every topic of the stage (GET /api/v1/topics), by name. */
  async listTopics(): Promise<TopicState[]> {
    return (await this.get<{ topics: TopicState[] }>("/api/v1/topics")).topics ?? [];
  }

  /** One topic with its queue's depth (GET /api/v1/topics/{name}); unknown: a 404. */
  describeTopic(name: string): Promise<TopicState> {
    return this.get(`/api/v1/topics/${q(name)}`);
  }

  /**
   * Deletes a topic (DELETE /api/v1/topics/{name}, an admin token). A 409
   * while it holds jobs or is not listed, unless force.
   */
  deleteTopic(name: string, o: { force?: boolean } = {}): Promise<TopicDeleted> {
    return this.change("DELETE", withQuery(`/api/v1/topics/${q(name)}`, { force: o.force ? "true" : undefined }), undefined, never);
  }
}
