// A stand-in Durable Object class under the local lifecycle emulation (worker/lifecycle/), for
// tests/worker/lifecycle.test.mjs: what the shard's object cannot be made to do on demand, leave a
// timer pending after its request. Its "memory" is a module variable, as the shard's slice is the
// isolate's, which the emulation discards with its last live object.
//   GET /           {hit, constructed, fired, alarms}: `hit` whether the memory was there (it is
//                   filled now), `constructed` how many instances were built in this isolate,
//                   `fired` how many of its timers ran, `alarms` how many alarms it handled
//   POST /timer?ms= schedules a timer `ms` ahead and answers at once
//   POST /alarm?ms= sets the object's alarm `ms` ahead
// The worker's default export is the emulation's control; the class is bound as STAND_IN.
import "../lifecycle/pending.mjs";
import { DurableObject } from "cloudflare:workers";
import { lifecycle, control } from "../lifecycle/object.mjs";

let memory = null;
let constructed = 0;
let fired = 0;
let alarms = 0;

class Counter extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    constructed++;
  }

  async fetch(request) {
    const url = new URL(request.url);
    if (url.pathname === "/timer") {
      setTimeout(() => fired++, Number(url.searchParams.get("ms")));
      return Response.json({});
    }
    if (url.pathname === "/alarm") {
      await this.ctx.storage.setAlarm(Date.now() + Number(url.searchParams.get("ms")));
      return Response.json({});
    }
    const hit = memory !== null;
    memory ??= "filled";
    return Response.json({ hit, constructed, fired, alarms });
  }

  alarm() {
    alarms++;
  }
}

export const StandIn = lifecycle(Counter, () => (memory = null));
export default control("STAND_IN");
