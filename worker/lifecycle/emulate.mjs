// The Node side of the local Durable Object lifecycle emulation (worker/local.mjs, `lifecycle:
// "cloudflare"`): Cloudflare's schedule (docs/PLATFORM.md, "Durable Object lifecycle" and
// "Shutdown, code updates and rollouts"), applied to object workers whose entry module runs its
// class under ./object.mjs's wrapper.
//
// It reads each object worker's state through its control socket a few dozen times per
// hibernation period: every object's work in progress and idle time, and what the isolate has
// pending, as the isolate itself counts them (./pending.mjs, ./object.mjs). An object idle and
// hibernateable for HIBERNATE_MS is hibernated; one idle but not hibernateable is evicted after a
// random time in EVICT_MS without a request or event (drawn again after each). Both discard the
// instance, and the isolate's memory with its last live object. `newVersion()` restarts every
// object: new requests are held, those in progress get GRACE_MS to finish, then every object is
// restarted (the calls still running are cut) and the held requests go to the new instances.
// Every time is multiplied by `timeScale`.
//
// Each action is decided on a reading and carried out only if the object did nothing since
// (its `epoch`), so a request that arrives in between is never caught by a discard.

/** Cloudflare's times (ms): hibernation after idle, eviction window, grace at a restart. */
export const HIBERNATE_MS = 10_000;
export const EVICT_MS = [70_000, 140_000];
export const GRACE_MS = 30_000;

/**
 * @typedef {{name: string, id: string, live: boolean, busy: boolean, hibernateable: boolean,
 *   idleMs: number, sinceActiveMs: number, epoch: number}} Reading
 * @typedef {{at: number, worker: string, object: string, what: "hibernated"|"evicted"|"restarted"|"error",
 *   memory?: boolean, cut?: number, detail?: string}} LifecycleEvent
 */

/**
 * Starts emulating the lifecycle of the objects behind `controls` (each object worker's control
 * URL, by worker name).
 * @param {Record<string, string>} controls
 * @param {{timeScale?: number, random?: () => number, onEvent?: (e: LifecycleEvent) => void}} [o]
 *   `onEvent` is told each event as it happens
 * @returns {{events: LifecycleEvent[], newVersion: () => Promise<LifecycleEvent[]>, stop: () => Promise<void>}}
 */
export function emulateLifecycle(controls, { timeScale = 1, random = Math.random, onEvent = () => {} } = {}) {
  if (!(timeScale > 0)) throw new Error(`timeScale ${timeScale}: expected a number > 0`);
  const scaled = (ms) => ms * timeScale;
  const pollMs = Math.min(500, Math.max(10, scaled(HIBERNATE_MS) / 20));
  /** @type {LifecycleEvent[]} */
  const events = [];
  /** Each object's eviction delay, drawn for its current epoch. */
  const evictAfter = new Map();
  const evictionDelay = (r) => {
    const drawn = evictAfter.get(r.id);
    if (drawn?.epoch === r.epoch) return drawn.ms;
    const ms = scaled(EVICT_MS[0] + random() * (EVICT_MS[1] - EVICT_MS[0]));
    evictAfter.set(r.id, { epoch: r.epoch, ms });
    return ms;
  };
  const note = (worker, event) => {
    const noted = { at: Date.now(), worker, ...event };
    events.push(noted);
    onEvent(noted);
    return noted;
  };

  /** Reads one object worker and hibernates or evicts what is due. */
  async function tend(worker) {
    const { objects } = await call(controls[worker], "GET", "/state");
    for (const r of /** @type {Reading[]} */ (objects)) {
      if (!r.live || r.busy) continue;
      let what = null;
      if (r.hibernateable && r.idleMs >= scaled(HIBERNATE_MS)) what = "hibernated";
      else if (!r.hibernateable && r.sinceActiveMs >= evictionDelay(r)) what = "evicted";
      if (!what) continue;
      const done = await call(controls[worker], "POST", `/discard?id=${r.id}&epoch=${r.epoch}`);
      if (done.discarded) note(worker, { object: r.name, what, memory: done.memory });
    }
  }

  let stopped = false;
  const loops = Object.keys(controls).map(async (worker) => {
    while (!stopped) {
      await tend(worker).catch((e) => stopped || note(worker, { object: "", what: "error", detail: String(e) }));
      await sleep(pollMs);
    }
  });

  /** Whether any object of any worker still has work in progress. */
  async function busy() {
    const states = await Promise.all(Object.values(controls).map((url) => call(url, "GET", "/state")));
    return states.some((s) => s.objects.some((r) => r.busy));
  }

  /** Holds new requests and waits, up to the grace time, for those in progress. */
  async function drain() {
    const deadline = Date.now() + scaled(GRACE_MS);
    await Promise.all(Object.values(controls).map((url) => call(url, "POST", "/retire")));
    while (Date.now() < deadline && (await busy())) await sleep(Math.min(pollMs, 25));
  }

  /** Restarts every live object (cutting what is still in progress), releases the held requests. */
  async function restartAll() {
    const restarted = [];
    for (const [worker, url] of Object.entries(controls)) {
      for (const r of await call(url, "POST", "/restart")) restarted.push(note(worker, { object: r.name, what: "restarted", memory: r.memory, cut: r.cut }));
    }
    return restarted;
  }

  return {
    events,
    async newVersion() {
      let restarted;
      try {
        await drain();
      } finally {
        restarted = await restartAll(); // even if the drain failed: no worker may keep holding requests
      }
      return restarted;
    },
    async stop() {
      stopped = true;
      await Promise.all(loops);
    },
  };
}

/** A control request; its JSON answer. */
async function call(url, method, path) {
  const r = await fetch(`${url}${path}`, { method });
  const body = await r.text();
  if (!r.ok) throw new Error(`lifecycle control ${method} ${path}: ${r.status} ${body}`);
  return JSON.parse(body);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
