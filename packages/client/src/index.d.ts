// Types of @cobordism/client (src/client.mjs).

/** A sampled token: its id, logit and log-probability under the distribution sampled from. */
export interface Sampled {
  token: number;
  logit: number;
  logprob: number;
}

/** The merged top-k of one hidden vector, best first (ties by token id). */
export interface TopK {
  entries: Sampled[];
  /** ln Σ exp(z) over the whole vocabulary. */
  logSumExp: number;
}

/**
 * Adjustments of the logits before sampling, applied by each shard to its own rows in
 * llama.cpp's order: allowedTokens, logitBias, repetitionPenalty, then frequencyPenalty and
 * presencePenalty; then temperature, the filters and the draw. OpenAI's `logit_bias`,
 * `presence_penalty`, `frequency_penalty` and llama.cpp's `repetition_penalty`, in camelCase.
 * Log-probabilities and logits returned are the adjusted ones.
 */
export interface AdjustOptions {
  /** Token id → bias added to its logit (OpenAI's map; -Infinity bans the token). */
  logitBias?: Record<number, number> | Map<number, number>;
  /** Subtracted once from the logit of every token of `history`; default 0. */
  presencePenalty?: number;
  /** Subtracted per occurrence of a token in `history`; default 0. */
  frequencyPenalty?: number;
  /** Divides positive, multiplies other logits of `history`'s tokens; default 1 (off). */
  repetitionPenalty?: number;
  /** The tokens so far (the window the penalties see), repeats counted. */
  history?: number[] | Uint32Array;
  /** Only these tokens may be drawn (a grammar's or a JSON schema's set for this step). */
  allowedTokens?: number[] | Uint32Array;
}

export interface SampleOptions extends AdjustOptions {
  /** 0 is greedy decoding; default 1. */
  temperature?: number;
  /** Keep the k most likely tokens (0: off). */
  topK?: number;
  /** Keep the smallest head whose probability reaches p (0: off). */
  topP?: number;
  /** Keep tokens at least minP times as likely as the most likely (0: off). */
  minP?: number;
  /** The noise seed, one per decoding step; default 0. */
  seed?: number | bigint;
}

export interface LogprobsOptions extends AdjustOptions {
  /** Default 1. */
  temperature?: number;
}

export interface ClientOptions {
  /** Shard base URLs, shard i at index i. */
  endpoints?: string[];
  /** Or service bindings (anything with `fetch`), shard i at index i. */
  fetchers?: { fetch(input: string, init?: RequestInit): Promise<Response> }[];
  /** The shards' bearer token. */
  token?: string;
  /** Refuse answers from any other manifest version. */
  manifestVersion?: string;
  /** Per request; default 30000. */
  timeoutMs?: number;
  /** Per shard after the first attempt; default 5 (the CLI's too). */
  retries?: number;
  /** The fetch used with `endpoints`; default globalThis.fetch. */
  fetch?: (input: string, init?: RequestInit) => Promise<Response>;
  /** The shards' mode: "exact" (default) or "int8" (kquant's fast mode, `?precision=int8`). */
  precision?: "exact" | "int8";
  /**
   * Merge calls of the same kind made in one turn of the event loop into one request per shard
   * of up to 8 vectors: the same results, fewer subrequests. Default false. For calls of one
   * request (several sessions decoded in one request) or outside Workers (Node): in a Worker,
   * calls of different requests must not be merged — workerd cancels a request that waits on
   * another request's fetch (the shards coalesce concurrent requests themselves).
   */
  coalesce?: boolean;
  /**
   * The session key sent with every call (`X-Cobordism-Session`). With object residency and
   * replicas, the same key reaches the same replica of each shard: give one per decoding stream
   * (a conversation id) and use it from `warm()` to the last token. Default: a random key per
   * client.
   */
  session?: string;
}

/**
 * A failure naming the shard and its URL (and the HTTP status and error code, when there was an
 * answer). `retryable`: the same call may succeed later (the shard was loading, busy or
 * unreachable through every retry); false when only a fix helps (a 4xx: the request, the token;
 * a shard whose deployment is wrong; answers that do not make up the vocabulary).
 */
export class ShardError extends Error {
  shard?: number;
  url?: string;
  status?: number;
  code?: string;
  retryable: boolean;
}

export class LmHeadClient {
  constructor(options: ClientOptions);
  /** Starts every shard loading its slice (call it before prefill); each shard's state. */
  warm(): Promise<Array<"ready" | "loading">>;
  /** One token per hidden vector (a Float32Array, or an array of up to 8 of them). */
  sample(hidden: Float32Array, options?: SampleOptions): Promise<Sampled>;
  sample(hidden: Float32Array[], options?: SampleOptions): Promise<Sampled[]>;
  topK(hidden: Float32Array, k: number, options?: AdjustOptions): Promise<TopK>;
  topK(hidden: Float32Array[], k: number, options?: AdjustOptions): Promise<TopK[]>;
  logprobs(hidden: Float32Array, tokens: number[], options?: LogprobsOptions): Promise<number[]>;
  logprobs(hidden: Float32Array[], tokens: number[], options?: LogprobsOptions): Promise<number[][]>;
  logits(hidden: Float32Array, options?: AdjustOptions): Promise<Float32Array>;
  logits(hidden: Float32Array[], options?: AdjustOptions): Promise<Float32Array[]>;
}
