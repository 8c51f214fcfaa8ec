// A bulk group of 1,000 items, each served through the worker's http handler
// by thumb below, run to its callback. Against make run with the handler:
//   make run DEV_FLAGS='--http thumb=http://127.0.0.1:8787/'
//   cd sdk/typescript && npm ci && npx tsc -p . && node dist/examples/bulkgroup.js
import type { AddressInfo } from "node:net";
import { callbackHandler, Client, jobHandler, Kill, serve, type Delivery } from "../src/index.js"; // "sluice-client"

const env = process.env;
const thumb = jobHandler(async (job: Delivery<{ src: string; w: number }>) => { // the worker POSTs each item here
  if (job.payload.w <= 0) throw new Kill("width must be positive"); // a 4xx: the item is dead, not retried
  return { thumb: `${job.payload.src}@${job.payload.w}px` }; // a 2xx: the item's result
});
const handler = await serve(thumb, { port: Number(env.THUMB_PORT ?? 8787) });
let done!: (cb: { group: string; total: number; done: number; dead: number }) => void;
const callback = new Promise<{ group: string; total: number; done: number; dead: number }>((r) => (done = r));
const receiver = await serve(callbackHandler(done, { secrets: null })); // plain sluice dev signs nothing: else secrets: [...]

const items = Array.from({ length: Number(env.ITEMS ?? 1000) }, (_, i) => ({ src: `img${i}.png`, w: 64 }));
const g = await new Client(env.SLUICE_GATE ?? "http://127.0.0.1:8080").enqueueGroup("jobs", env.THUMB_TYPE ?? "thumb", items, {
  callback: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/done`,
});
console.log(`group ${g.group}: ${g.count} items in Kafka`);
const cb = await Promise.race([callback, new Promise<never>((_, no) => setTimeout(() => no(new Error("no callback within 5 minutes")), 300_000).unref())]);
console.log(`callback: group ${cb.group}: ${cb.total} items, ${cb.done} done, ${cb.dead} dead`);
handler.close();
receiver.close();
handler.closeAllConnections();
receiver.closeAllConnections();
