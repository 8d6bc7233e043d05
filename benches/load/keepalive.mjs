#!/usr/bin/env node
// Cross-check for wrk's socket errors: C raw keep-alive HTTP/1.1 connections, each sending the
// next POST as soon as the previous answer is complete, for S seconds; reports answers per
// connection, statuses and every connection the server closed early.
//   node benches/load/keepalive.mjs ENDPOINT HIDDEN_FILE [CONNECTIONS=8] [SECONDS=60]
import net from "node:net";
import { readFileSync } from "node:fs";

const [endpoint, hiddenFile, c = "8", s = "60"] = process.argv.slice(2);
if (!endpoint || !hiddenFile) {
  console.error("usage: keepalive.mjs ENDPOINT HIDDEN_FILE [CONNECTIONS] [SECONDS]");
  process.exit(2);
}
const url = new URL(endpoint);
const body = readFileSync(hiddenFile);
const request = Buffer.concat([
  Buffer.from(
    `POST /cobordism-lm-head HTTP/1.1\r\nHost: ${url.host}\r\n` +
      `Content-Type: application/octet-stream\r\nContent-Length: ${body.length}\r\n\r\n`,
  ),
  body,
]);
const deadline = Date.now() + Number(s) * 1000;
const statuses = {};
const closes = [];

function connection(id) {
  return new Promise((resolve) => {
    let answers = 0;
    let buf = Buffer.alloc(0);
    let end = -1;
    const socket = net.connect(Number(url.port), url.hostname, () => socket.write(request));
    socket.on("data", (data) => {
      buf = Buffer.concat([buf, data]);
      for (;;) {
        if (end < 0) {
          const i = buf.indexOf("\r\n\r\n");
          if (i < 0) return;
          const head = buf.subarray(0, i).toString();
          const status = head.split(" ")[1];
          statuses[status] = (statuses[status] ?? 0) + 1;
          end = i + 4 + Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? 0);
        }
        if (buf.length < end) return;
        buf = buf.subarray(end);
        end = -1;
        answers++;
        if (Date.now() > deadline) return socket.end();
        socket.write(request);
      }
    });
    socket.on("error", (e) => closes.push({ connection: id, after: answers, error: e.code }));
    socket.on("close", () => {
      if (Date.now() <= deadline) closes.push({ connection: id, after: answers, closedBy: "server" });
      resolve(answers);
    });
  });
}

const answers = await Promise.all(Array.from({ length: Number(c) }, (_, i) => connection(i)));
console.log(JSON.stringify({ connections: Number(c), seconds: Number(s), answers, statuses, closes }));
process.exitCode = closes.length === 0 && Object.keys(statuses).every((k) => k === "200") ? 0 : 1;
