// The adjustments a call may carry: logit bias, the presence, frequency and repetition penalties
// over the tokens so far, and an allowed-token set. They change the logits before sampling; each
// shard applies them to its own rows, in cobordism_protocol's order (llama.cpp's: allowed set,
// bias, repetition, frequency and presence penalties; then temperature, the filters, the draw).
// The names are OpenAI's (logit_bias, presence_penalty, frequency_penalty) and llama.cpp's
// (repetition_penalty) in this client's camelCase. The record each vector carries after the
// hidden vectors is written by the protocol crate (wasm): this file only reads the options.
import * as wasm from "../dist/client_js.js";
import { concat } from "./answers.mjs";

/** The options that adjust the logits. */
export const ADJUST_OPTIONS = ["logitBias", "presencePenalty", "frequencyPenalty", "repetitionPenalty", "history", "allowedTokens"];

/** Token ids of option `name`: a Uint32Array as it is, or an array of integers in 0 … 2^32 − 1. */
function tokenIds(name, ids) {
  if (ids instanceof Uint32Array) return ids;
  if (!Array.isArray(ids) && !ArrayBuffer.isView(ids)) throw new TypeError(`${name} must be an array of token ids`);
  const out = new Uint32Array(ids.length);
  for (let i = 0; i < ids.length; i++) {
    const t = ids[i];
    if (!Number.isInteger(t) || t < 0 || t >= 2 ** 32) throw new RangeError(`${name}[${i}] is ${t}, not a token id`);
    out[i] = t;
  }
  return out;
}

/** `logitBias` (`{ [token]: bias }` as OpenAI takes it, or a Map) as tokens and biases. */
function biasEntries(logitBias) {
  if (logitBias === undefined) return [new Uint32Array(), new Float32Array()];
  const plain = typeof logitBias === "object" && logitBias !== null && !Array.isArray(logitBias) && !ArrayBuffer.isView(logitBias);
  const entries = logitBias instanceof Map ? [...logitBias] : plain ? Object.entries(logitBias) : null;
  if (!entries) throw new TypeError("logitBias must be an object (or Map) of token id → bias");
  const tokens = tokenIds("logitBias's tokens", entries.map(([t]) => (typeof t === "string" && /^\d+$/.test(t) ? Number(t) : t)));
  const biases = Float32Array.from(entries, ([t, b]) => {
    if (typeof b !== "number" || Number.isNaN(b)) throw new RangeError(`logitBias of token ${t} is ${b}: give a number, or -Infinity to ban it`);
    return b;
  });
  return [tokens, biases];
}

/** A penalty option: a finite number (the protocol checks its range). */
function penalty(name, value, off) {
  if (value === undefined) return off;
  if (typeof value !== "number") throw new RangeError(`${name} must be a number, not ${typeof value}`);
  return value;
}

/**
 * The record of the adjustments in `options` (one vector's; see ADJUST_OPTIONS), or null when
 * they adjust nothing. Throws a RangeError (TypeError for a wrong type) before anything is sent;
 * token ids past the vocabulary are refused by the shards (ShardError, code bad_adjust).
 */
export function adjustRecord(options) {
  const [biasTokens, biasValues] = biasEntries(options.logitBias);
  const history = options.history === undefined ? new Uint32Array() : tokenIds("history", options.history);
  const allowed = options.allowedTokens === undefined ? undefined : tokenIds("allowedTokens", options.allowedTokens);
  let record;
  try {
    record = wasm.adjustRecord(
      penalty("presencePenalty", options.presencePenalty, 0),
      penalty("frequencyPenalty", options.frequencyPenalty, 0),
      penalty("repetitionPenalty", options.repetitionPenalty, 1),
      biasTokens,
      biasValues,
      history,
      allowed,
    );
  } catch (e) {
    throw new RangeError(e.message);
  }
  return record.length === 0 ? null : record;
}

/**
 * The adjustments' records of the calls' bodies sent as one request, in vector order (each
 * body: its vectors `n` and its `record`, or null), or null when none adjusts anything: a call
 * without adjustments gets the protocol's empty record for each of its vectors.
 */
function recordsOf(bodies) {
  if (bodies.every((b) => !b.record)) return null;
  const none = wasm.noAdjustRecord();
  return concat(bodies.flatMap((b) => Array(b.n).fill(b.record ?? none)));
}

/**
 * The request body of the hidden vectors `b` ({ bytes, n, parts }: `parts`, the calls' bodies
 * it merges, each with its record): the bytes, then the adjustments' section when a call has
 * one; `adjust` is the section's length for the query.
 */
export function withSection(b) {
  const records = recordsOf(b.parts ?? [b]);
  if (!records) return { bytes: b.bytes, n: b.n, adjust: undefined };
  const section = wasm.adjustSection(records, b.n);
  return { bytes: concat([b.bytes, section]), n: b.n, adjust: section.length };
}
