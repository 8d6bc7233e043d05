// Cloudflare's Durable Object lifecycle inside a local object worker (worker/local.mjs,
// `lifecycle: "cloudflare"`; docs/PLATFORM.md, "Durable Object lifecycle"): `lifecycle(Inner,
// …)` is the object class the worker exports in place of `Inner`, and `control(binding)` its
// default export, through which the harness in Node (./emulate.mjs) watches and acts. Never
// deployed.
//
// **The wrapper.** Each object of the exported class holds an instance of `Inner`, built at its
// first request or alarm (the object's constructor) and dropped when the object is hibernated,
// evicted or restarted: the next request or alarm builds a new one, as Cloudflare runs the
// constructor again. It forwards `fetch` and `alarm` (all that the shard's `ShardObject` has) and
// counts what the object is still doing: requests and alarms in progress, and, from compatibility
// date 2026-10-01 on (`WAIT_UNTIL_HOLDS` = "1", set by worker/local.mjs from the date it runs the
// shard at), the promises its code hands to `ctx.waitUntil`: before that date an object's
// `waitUntil` keeps nothing alive (docs/PLATFORM.md, "`waitUntil` and pending I/O in Durable
// Objects"), so work only it holds is cut with the object. With the isolate's pending timers and
// subrequests (./pending.mjs), that is what makes it hibernateable. Timers and
// subrequests cannot be told apart by object, so in an isolate shared by several objects (a
// shard's colocated replicas) one object's pending timer keeps all of them from hibernating, and
// the idle time of each starts when the isolate last became quiet.
//
// **Memory.** Workerd runs every object of a worker in the worker's one isolate and cannot
// discard that isolate alone. What an object keeps outside its instance (the shard: its wasm
// linear memory, with the slice) is the isolate's, so it is discarded with `discardMemory` (given
// by the entry module) when the last live object of the isolate goes, and the isolate's pending
// timers with it (`forget`). With one object per worker, the shards' case unless replicas share
// an isolate, that is every hibernation, eviction and restart.
//
// **Contexts.** Every action on an object runs in that object's own context: the control calls
// the object's `lifecycle*` methods over RPC (which no front can call). Workerd refuses I/O from
// one request's context on another's objects, and a promise settled from the control's context
// would resume the object's code in the wrong one. The control only reads the counts and sets
// the `retiring` flag, which held requests poll with the harness's uncounted timer.
//
// **Requests to the emulation.** A request or alarm that arrives while a new version is being
// rolled out (`retiring`) waits until the restart is over and is then served by the new
// instance: in-flight requests get their grace time, new ones go to the new version.
import { DurableObject } from "cloudflare:workers";
import { pending, forget, harnessSleep } from "./pending.mjs";

/** How often a request held during a restart looks whether the restart is over (ms). */
const HELD_POLL_MS = 5;

/** The objects of this isolate, by id. */
const objects = new Map();

/** A new version is being rolled out: new requests wait (see the top). */
let retiring = false;

/**
 * The object class that runs `Inner` under the emulated lifecycle.
 * @param {new (ctx: any, env: any) => {fetch(r: Request): Promise<Response>, alarm?(info?: any): Promise<void>}} Inner
 * @param {() => void} discardMemory discards what the isolate holds for its objects
 */
export function lifecycle(Inner, discardMemory) {
  return class extends DurableObject {
    constructor(ctx, env) {
      super(ctx, env);
      /** The instance of `Inner`; null before the first request and after a discard. */
      this.inner = null;
      /** What the current instance is doing: cut functions of its calls, its pending tasks. */
      this.work = { calls: new Set(), tasks: 0 };
      /** When a call or task last started or ended (ms since the epoch). */
      this.lastActive = Date.now();
      /** Changes at every start and end, so that an action decided on a reading is refused
       * if anything happened since. */
      this.epoch = 0;
      if (env.WAIT_UNTIL_HOLDS === "1") countTasks(this, ctx);
      objects.set(ctx.id.toString(), this);
    }

    fetch(request) {
      return this.run((inner) => inner.fetch(request));
    }

    alarm(info) {
      return this.run((inner) => inner.alarm?.(info));
    }

    /** Runs `call` on the current instance (built first if there is none), counted and cut
     * short by a restart past its grace time. */
    async run(call) {
      while (retiring) await harnessSleep(HELD_POLL_MS);
      this.inner ??= new Inner(this.ctx, this.env);
      const work = this.work;
      let cut;
      const cutShort = new Promise((_, reject) => (cut = reject));
      work.calls.add(cut);
      this.touch();
      try {
        return await Promise.race([call(this.inner), cutShort]);
      } finally {
        work.calls.delete(cut);
        this.touch();
      }
    }

    touch() {
      this.lastActive = Date.now();
      this.epoch++;
    }

    get name() {
      return this.ctx.id.name ?? this.ctx.id.toString();
    }

    /** What the harness decides on (see `state` below). */
    reading(now, isolate) {
      const busy = this.work.calls.size + this.work.tasks > 0;
      const hibernateable = !busy && isolate.timers === 0 && isolate.fetches === 0;
      return {
        name: this.name,
        id: this.ctx.id.toString(),
        live: this.inner !== null,
        busy,
        hibernateable,
        idleMs: now - Math.max(this.lastActive, isolate.quietSince),
        sinceActiveMs: now - this.lastActive,
        epoch: this.epoch,
      };
    }

    /** Harness (RPC): drops the instance if nothing happened since the reading of `epoch`
     * and it is idle; then, if it was the isolate's last live object, the isolate's memory.
     * Not during a restart: the requests it holds are waiting for this object. */
    lifecycleDiscard(epoch) {
      const idle = this.work.calls.size + this.work.tasks === 0;
      if (epoch !== this.epoch || !idle || !this.inner || retiring) return { discarded: false };
      return { discarded: true, memory: this.discard() };
    }

    /** Harness (RPC): a new version: the calls still in progress are cut, the instance dropped
     * (and the isolate's memory with the last object). */
    lifecycleRestart() {
      const cut = this.work.calls.size;
      const why = new Error("lifecycle emulation: the object restarted for a new version before this request finished");
      for (const fail of this.work.calls) fail(why);
      const memory = this.discard();
      return { cut, memory };
    }

    /** Drops the instance and what it was doing; returns whether the isolate's memory went too. */
    discard() {
      this.inner = null;
      this.work = { calls: new Set(), tasks: 0 };
      this.touch();
      if ([...objects.values()].some((o) => o.inner)) return false;
      forget();
      discardMemory();
      return true;
    }
  };
}

/** Counts the promises the object hands to `ctx.waitUntil` as work in progress. */
function countTasks(object, ctx) {
  const waitUntil = ctx.waitUntil.bind(ctx);
  Object.defineProperty(ctx, "waitUntil", {
    value(promise) {
      const work = object.work;
      work.tasks++;
      object.touch();
      const done = () => {
        work.tasks--;
        object.touch();
      };
      Promise.resolve(promise).then(done, done);
      waitUntil(promise);
    },
  });
}

/**
 * The worker's default export, reached by the harness alone (a loopback socket of its own):
 * `GET /state` (the isolate's counts and every object's reading), `POST /discard?id=&epoch=`,
 * `POST /retire`, `POST /restart` (every live object; answers what each had in progress).
 * @param {string} binding the worker's binding of the wrapped class (for the RPC calls)
 */
export function control(binding) {
  return {
    async fetch(request, env) {
      const url = new URL(request.url);
      const stub = (id) => env[binding].get(env[binding].idFromString(id));
      switch (`${request.method} ${url.pathname}`) {
        case "GET /state":
          return Response.json(state());
        case "POST /discard":
          return Response.json(await stub(url.searchParams.get("id")).lifecycleDiscard(Number(url.searchParams.get("epoch"))));
        case "POST /retire":
          retiring = true;
          return Response.json({});
        case "POST /restart": {
          const restarted = [];
          try {
            for (const [id, o] of objects) {
              if (o.inner) restarted.push({ name: o.name, ...(await stub(id).lifecycleRestart()) });
            }
          } finally {
            retiring = false;
          }
          return Response.json(restarted);
        }
        default:
          return new Response("not a lifecycle route", { status: 404 });
      }
    },
  };
}

/** The isolate's pending timers and subrequests and every object's reading. */
function state() {
  const isolate = pending();
  const now = Date.now();
  return { timers: isolate.timers, fetches: isolate.fetches, objects: [...objects.values()].map((o) => o.reading(now, isolate)) };
}
