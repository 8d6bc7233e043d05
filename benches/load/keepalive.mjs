#!/usr/bin/env node
// Second load generator, to check wrk's socket errors independently of wrk: C raw keep-alive
// HTTP/1.1 connections each POST the hidden vector (the request of benches/load/post.lua) and
// send the next one as soon as the previous answer is complete, for S seconds. It records, per
// connection, the answers and every close or error the server caused (time since the start,
// whether a request was in flight), reconnects, and prints one JSON summary with the closes
// grouped into bursts (closes within 50 ms of each other). Exit status 1 on any close or non-200.
//   node benches/load/keepalive.mjs --url http://127.0.0.1:PORT/cobordism-lm-head \
//     --hidden target/load-test/h.f32 [--connections 8] [--seconds 60]
import net from "node:net";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

const { values: o } = parseArgs({
  options: {
    url: { type: "string" },
    hidden: { type: "string" },
    connections: { type: "string", default: "8" },
    seconds: { type: "string", default: "60" },
  },
});
if (!o.url || !o.hidden) {
  console.error("usage: keepalive.mjs --url URL --hidden FILE [--connections C] [--seconds S]");
  process.exit(2);
}
const url = new URL(o.url);
const body = readFileSync(o.hidden);
const request = Buffer.concat([
  Buffer.from(
    `POST ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\n` +
      `Content-Type: application/octet-stream\r\nContent-Length: ${body.length}\r\n\r\n`,
  ),
  body,
]);
const start = performance.now();
const now = () => Math.round(performance.now() - start);
const deadline = Number(o.seconds) * 1000;
const statuses = {};
const closes = [];

/** Length of the complete chunked body at the start of `buf`, or -1 if incomplete. */
function chunkedLength(buf) {
  let at = 0;
  for (;;) {
    const eol = buf.indexOf("\r\n", at);
    if (eol < 0) return -1;
    const size = parseInt(buf.subarray(at, eol).toString(), 16);
    at = eol + 2 + size + 2;
    if (at > buf.length) return -1;
    if (size === 0) return at; // no trailers expected
  }
}

/** One client connection, reconnected after every server close until the deadline. */
function connection(id) {
  const stats = { answers: 0, sockets: 0 };
  return new Promise((resolve) => {
    const open = () => {
      stats.sockets++;
      let buf = Buffer.alloc(0);
      let head = null; // {status, length, chunked, bodyAt} of the answer being read
      let inFlight = false;
      let error = null;
      let ours = false; // we ended the socket ourselves
      const send = () => ((inFlight = true), socket.write(request));
      const socket = net.connect(Number(url.port), url.hostname, send);
      socket.setNoDelay(true);
      socket.on("data", (data) => {
        buf = buf.length ? Buffer.concat([buf, data]) : data;
        for (;;) {
          if (!head) {
            const i = buf.indexOf("\r\n\r\n");
            if (i < 0) return;
            const text = buf.subarray(0, i).toString();
            head = {
              status: text.split(" ")[1],
              length: Number(/\r\ncontent-length: *(\d+)/i.exec(text)?.[1] ?? -1),
              chunked: /\r\ntransfer-encoding: *chunked/i.test(text),
            };
            buf = buf.subarray(i + 4);
          }
          const n = head.chunked ? chunkedLength(buf) : head.length;
          if (n < 0 || buf.length < n) return;
          statuses[head.status] = (statuses[head.status] ?? 0) + 1;
          buf = buf.subarray(n);
          head = null;
          inFlight = false;
          stats.answers++;
          if (now() >= deadline) return (ours = true), socket.end();
          send();
        }
      });
      socket.on("end", () => ours || closes.push({ t: now(), connection: id, event: "end", inFlight }));
      socket.on("error", (e) => (error = e.code ?? e.message));
      socket.on("close", () => {
        if (!ours) closes.push({ t: now(), connection: id, event: "close", inFlight, error });
        if (!ours && now() < deadline) return open();
        resolve(stats);
      });
    };
    open();
  });
}

const perConnection = await Promise.all(
  Array.from({ length: Number(o.connections) }, (_, i) => connection(i)),
);
// Bursts: server closes (one "close" per socket) within 50 ms of the previous one.
const bursts = [];
for (const c of closes.filter((c) => c.event === "close").sort((a, b) => a.t - b.t)) {
  const last = bursts.at(-1);
  if (last && c.t - last.lastT <= 50) {
    last.connections.push(c.connection);
    last.inFlight += c.inFlight;
    last.lastT = c.t;
  } else bursts.push({ t: c.t, lastT: c.t, connections: [c.connection], inFlight: +c.inFlight });
}
const total = perConnection.reduce((s, c) => s + c.answers, 0);
console.log(
  JSON.stringify(
    {
      connections: Number(o.connections),
      seconds: Number(o.seconds),
      requests: total,
      perSecond: +(total / (now() / 1000)).toFixed(1),
      statuses,
      perConnection,
      serverCloses: closes.filter((c) => c.event === "close").length,
      bursts: bursts.map(({ lastT, ...b }) => ({ ...b, spanMs: lastT - b.t })),
      closes,
    },
    null,
    1,
  ),
);
process.exitCode = closes.length === 0 && Object.keys(statuses).every((k) => k === "200") ? 0 : 1;
