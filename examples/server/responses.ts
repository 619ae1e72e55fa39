// Pieces of the responses that several API families share.
import { randomBytes } from "node:crypto";
import type { FastifyReply } from "fastify";
import type { GenerateResult, Model, StopReason } from "../../src/index.js";

/** Response ids as the APIs spell them: `chatcmpl-…`, `cmpl-…`, `msg_…`. */
export function responseId(prefix: string): string {
  return prefix + randomBytes(16).toString("hex");
}

export function unixSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

export const SYSTEM_FINGERPRINT = "bloomery";

/** OpenAI's finish_reason. */
export function finishReason(reason: StopReason): "stop" | "length" {
  return reason === "maxTokens" || reason === "contextFull" ? "length" : "stop";
}

/** llama-server's `timings` object. */
export function llamaTimings(result: GenerateResult): Record<string, number> {
  const { promptTokens, cachedPromptTokens, promptMs, decodeTokens, decodeMs, draftTokens, draftAccepted } =
    result.timings;
  const predicted = result.tokens.length;
  // The first generated token is drawn with the prompt's pass; the rest take one pass each.
  return {
    cache_n: cachedPromptTokens,
    prompt_n: promptTokens,
    prompt_ms: promptMs,
    prompt_per_token_ms: promptTokens ? promptMs / promptTokens : 0,
    prompt_per_second: promptMs ? (promptTokens * 1000) / promptMs : 0,
    predicted_n: predicted,
    predicted_ms: decodeMs,
    predicted_per_token_ms: decodeTokens ? decodeMs / decodeTokens : 0,
    predicted_per_second: decodeMs ? (decodeTokens * 1000) / decodeMs : 0,
    // As llama-server: only for a run that drafted.
    ...(draftTokens > 0 ? { draft_n: draftTokens, draft_n_accepted: draftAccepted } : {}),
  };
}

/** Which stop string ended the run: the text of its tokens just past the emitted text begins with it. */
export function stoppingWord(model: Model, result: GenerateResult, stop: readonly string[] | undefined): string {
  if (result.stopReason !== "stop" || !stop) return "";
  const rest = model.detokenize(result.tokens).slice(result.text.length);
  return stop.find((word) => rest.startsWith(word)) ?? "";
}

/**
 * The prompt's tokens as llama-server makes them: special tokens parsed, BOS added when the model
 * asks. Tokenized on a worker thread: a long prompt must not hold the event loop.
 */
export async function promptTokens(model: Model, prompt: string): Promise<number[]> {
  return plainArray(await model.tokenizeAsync(prompt, { special: true, addSpecial: true }));
}

/** The ids as an array of numbers (a plain loop: Array.from walks a typed array several times slower). */
function plainArray(ids: Uint32Array): number[] {
  const out = new Array<number>(ids.length);
  for (let i = 0; i < ids.length; i++) out[i] = ids[i]!;
  return out;
}

/**
 * Sets a header under llama-server's spelling of its name (fastify's reply.header lowercases names): HTTP reads
 * names in any case, but some clients compare them as written, as llama.cpp's own server tests do.
 */
export function headerAsSpelled(reply: FastifyReply, name: string, value: string): void {
  reply.raw.setHeader(name, value);
}
