// An example Worker on @cobordism/kquant: the first request streams a quantized matrix from R2
// into a ResidentSlice (kept in wasm memory for the life of the isolate); every POST of a
// little-endian f32 vector (COLS floats) is answered with the ROWS logits, little-endian f32
// (`?precision=int8`: the 8-bit mode, `matVecInt8`). The header `x-kquant-backend` names the
// kernels' backend (`simd128-relaxed` in Workers: the package's relaxed-SIMD build).
//
// Bindings (example/wrangler.toml): WEIGHTS (R2 bucket), KEY, DTYPE ("q4_k" | "q6_k"), ROWS, COLS.
import { ResidentSlice, kernelBackend } from "@cobordism/kquant";

/** @type {ResidentSlice | undefined} */
let slice;

/** Streams the R2 object into a new slice, chunk by chunk: one copy of the matrix, no more. */
async function load(env) {
  const object = await env.WEIGHTS.get(env.KEY);
  if (!object) throw new Error(`no R2 object ${env.KEY}`);
  const loaded = new ResidentSlice(env.DTYPE, Number(env.ROWS), Number(env.COLS));
  try {
    for await (const chunk of object.body) loaded.append(chunk);
    if (!loaded.isComplete) {
      throw new Error(`R2 object ${env.KEY} has ${loaded.byteLength} bytes, expected ${loaded.expectedBytes}`);
    }
    return loaded;
  } catch (e) {
    loaded.free();
    throw e;
  }
}

export default {
  async fetch(request, env) {
    if (request.method !== "POST") {
      return new Response("POST a little-endian f32 vector\n", { status: 405, headers: { allow: "POST" } });
    }
    const hit = slice !== undefined;
    if (!hit) {
      try {
        const loaded = await load(env);
        // Two cold requests may both have loaded: keep one.
        if (slice) loaded.free();
        else slice = loaded;
      } catch (e) {
        return new Response(`${e.message}\n`, { status: 503, headers: { "retry-after": "5" } });
      }
    }
    const body = await request.arrayBuffer();
    if (body.byteLength % 4 !== 0) {
      return new Response(`the body has ${body.byteLength} bytes, not a whole number of f32\n`, { status: 400 });
    }
    try {
      const x = new Float32Array(body);
      const int8 = new URL(request.url).searchParams.get("precision") === "int8";
      const logits = int8 ? slice.matVecInt8(x) : slice.matVec(x);
      return new Response(logits.buffer, {
        headers: {
          "content-type": "application/octet-stream",
          "x-cache": hit ? "hit" : "miss",
          "x-kquant-backend": kernelBackend(),
        },
      });
    } catch (e) {
      return new Response(`${e.message}\n`, { status: 400 });
    }
  },
};
