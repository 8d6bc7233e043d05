// An inference Worker's last step: a hidden state in, a sampled token out, through the eight
// lm-head shards. POST the hidden vector (little-endian f32) to /next-token?temperature=…&top_p=…
// &seed=…; the answer is {"token", "logprob"}. See README.md.
import { LmHeadClient, ShardError } from "@cobordism/client";

let client;

export default {
  async fetch(request, env) {
    if (request.method !== "POST" || new URL(request.url).pathname !== "/next-token") {
      return new Response("POST a hidden vector to /next-token\n", { status: 404 });
    }
    client ??= new LmHeadClient({ endpoints: env.SHARD_URLS.split(",").map((u) => u.trim()), token: env.SHARD_TOKEN });
    const q = new URL(request.url).searchParams;
    const number = (name, fallback) => (q.has(name) ? Number(q.get(name)) : fallback);
    const bytes = await request.arrayBuffer();
    if (bytes.byteLength === 0 || bytes.byteLength % 4 !== 0) {
      return Response.json({ error: "bad_hidden", detail: "send the hidden state as little-endian f32" }, { status: 400 });
    }
    try {
      const { token, logprob } = await client.sample(new Float32Array(bytes), {
        temperature: number("temperature", 1),
        topK: number("top_k", 0),
        topP: number("top_p", 0),
        minP: number("min_p", 0),
        seed: BigInt(q.get("seed") ?? "0"),
      });
      return Response.json({ token, logprob });
    } catch (e) {
      const status = e instanceof ShardError ? 502 : 400;
      return Response.json({ error: e.name, detail: e.message }, { status });
    }
  },
};
