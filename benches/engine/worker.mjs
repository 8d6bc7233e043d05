// The engine benchmark inside workerd: one POSTed job (JSON) runs harness.mjs on the wasm module
// and answers its results as JSON. run.mjs starts workerd with this module and the wasm.
import wasm from "./engine.wasm";
import { bitExactLines, candle, idioms, imports, int8Check, kernel, layout, relaxed } from "./harness.mjs";

const instance = new WebAssembly.Instance(wasm, imports(wasm));
const instantiate = (module) => new WebAssembly.Instance(module, imports(module)).exports;

export default {
  async fetch(request) {
    const job = await request.json();
    const ex = instance.exports;
    const now = () => Date.now(); // advances during compute locally (not in production)
    if (job.what === "idioms") return Response.json(idioms(ex, now, job));
    if (job.what === "kernel") return Response.json(kernel(ex, now, job));
    if (job.what === "layout") return Response.json(layout(ex, now, job));
    if (job.what === "candle") {
      // llama.cpp's ggml, embedded as a second module by run.mjs when it was built.
      const gx = job.ggml ? instantiate((await import("./ggml.wasm")).default) : null;
      return Response.json(candle(ex, now, job, gx));
    }
    if (job.what === "int8-check") return Response.json(int8Check(ex, now, job));
    if (job.what === "bit-exact") return Response.json(bitExactLines(ex));
    if (job.what === "relaxed") {
      // The relaxed build, embedded as a second module by run.mjs for this job only.
      const other = instantiate((await import("./relaxed.wasm")).default);
      return Response.json(relaxed(ex, other, now, job));
    }
    if (job.what === "engine") {
      // Only present when the run asked for --allow-natives-syntax (diagnosis, never shipped).
      const { engine } = await import("./natives.mjs");
      return Response.json(engine());
    }
    return new Response(`unknown job ${job.what}`, { status: 400 });
  },
};
