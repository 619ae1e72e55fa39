/**
 * Sampling settings and stop strings for `Session.generate`. The sampler itself runs in
 * native code (native/engine/sampler.cc), on the worker thread that runs the forward pass.
 * @module
 */
import { BloomeryError } from "./errors.js";
import type { NativeSamplerOptions } from "./native.js";
import { isPromiseLike, optionKeys } from "./validate.js";

/**
 * How the next token is chosen. The stages run in llama.cpp's default order: `logitBias`, the
 * penalties, `topK`, `topP`, `minP`, `temperature`, then a draw seeded by `seed`. Defaults are
 * llama.cpp's except `temperature`, which defaults to 0 (greedy) so that a generation without
 * settings is deterministic.
 */
export interface SamplingOptions {
  /** Divides the logits before the draw; 0 (default) always takes the most likely token. */
  temperature?: number;
  /** Keeps only the `topK` most likely tokens (default 40; 0: no limit). */
  topK?: number;
  /** Keeps the fewest most likely tokens whose probabilities add up to `topP` (default 0.95; 1: off). */
  topP?: number;
  /** Drops tokens less likely than `minP` times the most likely one (default 0.05; 0: off). */
  minP?: number;
  /**
   * Seeds the draw (an integer from 0 to 2^53 - 1): the same seed, prompt, settings and model give
   * the same text. Left out, each generation takes a fresh seed from the operating system.
   */
  seed?: number;
  /**
   * Makes tokens of the last `repeatLastN` tokens (prompt included) less likely: a positive logit
   * is divided by it, a negative one multiplied (llama.cpp's rule). Default 1: off.
   */
  repeatPenalty?: number;
  /** How many of the latest tokens the penalties look at (default 64; 0: off; -1: all of them). */
  repeatLastN?: number;
  /** Subtracted from the logit of every token in the penalty window, once (OpenAI's rule; default 0). */
  presencePenalty?: number;
  /** Subtracted from a token's logit once per time it occurs in the penalty window (default 0). */
  frequencyPenalty?: number;
  /** Added to the logits of the given token ids; `-Infinity` bans a token, a large value forces it. */
  logitBias?: Readonly<Record<number, number>>;
  /**
   * A GBNF grammar (llama.cpp's dialect, with a `root` rule) the generated text must follow:
   * tokens whose text it does not allow are never drawn, and the end-of-sequence token only
   * where the text is a whole sentence of it. As in llama.cpp, a token is also named whole, by id
   * (`<[128010]>`) or by its text (`<|im_end|>`, which must be exactly one token of the
   * vocabulary), or any token but one (`!<[128010]>`): that is how a grammar takes control
   * tokens, which have no text to follow. A bad grammar throws BloomeryError GRAMMAR_INVALID
   * with its line and column. Not together with `jsonSchema`.
   *
   * Or a promise of one (a grammar the application builds elsewhere, on a worker thread): the
   * generation starts once it settles, and ends before its first chunk with the promise's
   * rejection, or INVALID_ARGUMENT if it settles to anything but a string.
   */
  grammar?: string | PromiseLike<string>;
  /**
   * A JSON Schema the generated text must satisfy: it is turned into a grammar (see
   * `grammar`), so the text parses as JSON and validates against the schema. `{}` allows any
   * JSON value, `{ type: "object" }` any object. The conversion runs on a worker thread (see
   * `jsonSchemaToGrammar` for what it supports); keywords it cannot honour (`pattern`, `format`,
   * `minimum`, ...) end the generation before its first chunk with BloomeryError
   * JSON_SCHEMA_UNSUPPORTED naming them, a schema past `JSON_SCHEMA_LIMITS` with
   * JSON_SCHEMA_TOO_COMPLEX.
   */
  jsonSchema?: Readonly<Record<string, unknown>> | boolean;
  /**
   * Makes `grammar` (or `jsonSchema`) lazy, as llama-server's `grammar_lazy` with word triggers:
   * the text is free until one of these words appears in it, and from the first one found on the
   * grammar holds, reading the text from that word (so the grammar's sentences begin with a
   * trigger). A word that is the text of one control token (`<|tool_calls_section_begin|>`), which
   * has no text in the output, is that token: the grammar holds from it on, and must begin with it
   * (`<|tool_calls_section_begin|>` or `<[id]>`, see `grammar`). A token that completes a trigger
   * with text the grammar refuses after it ends the generation with BloomeryError GRAMMAR_INVALID.
   */
  grammarTriggers?: readonly string[];
  /**
   * Report each generated token's log-probability and those of the `logprobs` most likely
   * tokens (chunks' and the result's `logprobs`). As llama-server reports them by default, they
   * are the log-softmax of the model's logits: before logit bias, penalties, filters, grammar
   * and temperature. Left out: not reported.
   */
  logprobs?: number;
  /**
   * With `logprobs`: report instead the probabilities the draw chose by (as llama-server's
   * `post_sampling_probs`): after logit bias, penalties, top-k, top-p, min-p, grammar and
   * temperature, the alternatives being the tokens those kept (at most `logprobs` of them; a
   * dropped token's probability is 0). Default false.
   */
  logprobsAfterSampling?: boolean;
}

/** Every key of {@link SamplingOptions} (the compiler checks the list is whole). @internal */
export const SAMPLING_OPTIONS = optionKeys<SamplingOptions>()({
  temperature: true,
  topK: true,
  topP: true,
  minP: true,
  seed: true,
  repeatPenalty: true,
  repeatLastN: true,
  presencePenalty: true,
  frequencyPenalty: true,
  logitBias: true,
  grammar: true,
  jsonSchema: true,
  grammarTriggers: true,
  logprobs: true,
  logprobsAfterSampling: true,
});

const NUMERIC_OPTIONS = [
  "temperature",
  "topK",
  "topP",
  "minP",
  "seed",
  "repeatPenalty",
  "repeatLastN",
  "presencePenalty",
  "frequencyPenalty",
] as const;

/**
 * The settings in the form the addon reads. Types and token ids are checked here; the native
 * sampler checks the ranges, naming the option.
 * @internal
 */
export function nativeSamplerOptions(options: SamplingOptions, vocabSize: number): NativeSamplerOptions {
  const out: NativeSamplerOptions = {};
  for (const name of NUMERIC_OPTIONS) {
    const value = options[name];
    if (value === undefined) continue;
    if (typeof value !== "number")
      throw new BloomeryError("INVALID_ARGUMENT", `${name} must be a number`, { [name]: value });
    out[name] = value;
  }
  if (options.logitBias !== undefined) {
    if (typeof options.logitBias !== "object" || options.logitBias === null) {
      throw new BloomeryError("INVALID_ARGUMENT", "logitBias must be an object of token id -> bias");
    }
    const entries = Object.entries(options.logitBias);
    out.biasTokens = new Int32Array(entries.length);
    out.biasValues = new Float32Array(entries.length);
    entries.forEach(([key, bias], i) => {
      const token = Number(key);
      if (!Number.isInteger(token) || token < 0 || token >= vocabSize) {
        throw new BloomeryError("INVALID_ARGUMENT", `logitBias names ${key}, not a token id below ${vocabSize}`, {
          token: key,
        });
      }
      if (typeof bias !== "number") {
        throw new BloomeryError("INVALID_ARGUMENT", `logitBias of token ${key} must be a number`, { token });
      }
      out.biasTokens![i] = token;
      out.biasValues![i] = bias;
    });
  }
  if (options.grammar !== undefined && options.jsonSchema !== undefined) {
    throw new BloomeryError("INVALID_ARGUMENT", "grammar and jsonSchema cannot be used together");
  }
  // The grammar itself (text, or a promise of it) is the session's to parse, off this thread.
  if (options.grammar !== undefined && typeof options.grammar !== "string" && !isPromiseLike(options.grammar)) {
    throw new BloomeryError("INVALID_ARGUMENT", "grammar must be a string or a promise of one");
  }
  if (options.grammarTriggers !== undefined) {
    const triggers: unknown = options.grammarTriggers;
    if (!Array.isArray(triggers) || triggers.some((t) => typeof t !== "string" || t.length === 0)) {
      throw new BloomeryError("INVALID_ARGUMENT", "grammarTriggers must be an array of non-empty strings");
    }
    if (options.grammar === undefined && options.jsonSchema === undefined) {
      throw new BloomeryError("INVALID_ARGUMENT", "grammarTriggers need a grammar or a jsonSchema");
    }
    out.grammarTriggers = [...(triggers as string[])];
  }
  if (options.logprobs !== undefined) {
    if (!Number.isInteger(options.logprobs) || options.logprobs < 0 || options.logprobs > vocabSize) {
      throw new BloomeryError("INVALID_ARGUMENT", `logprobs must be an integer from 0 to ${vocabSize}`, {
        logprobs: options.logprobs,
      });
    }
    out.logprobs = options.logprobs;
  }
  if (options.logprobsAfterSampling !== undefined) {
    if (typeof options.logprobsAfterSampling !== "boolean") {
      throw new BloomeryError("INVALID_ARGUMENT", "logprobsAfterSampling must be a boolean", {
        logprobsAfterSampling: options.logprobsAfterSampling,
      });
    }
    if (options.logprobsAfterSampling && out.logprobs === undefined) {
      throw new BloomeryError("INVALID_ARGUMENT", "logprobsAfterSampling needs logprobs");
    }
    out.logprobsAfterSampling = options.logprobsAfterSampling;
  }
  return out;
}

/**
 * Finds stop strings in streamed text. Text that could be the start of a stop string is held
 * back until the next piece shows whether it is one, so a stop string split over several tokens
 * is still found and none of it is ever emitted.
 * @internal
 */
export class StopStrings {
  readonly #stops: readonly string[];
  #held = "";

  constructor(stop: string | readonly string[] | undefined) {
    const stops = stop === undefined ? [] : typeof stop === "string" ? [stop] : stop;
    if (!Array.isArray(stops) || stops.some((s) => typeof s !== "string" || s.length === 0)) {
      throw new BloomeryError("INVALID_ARGUMENT", "stop must be a non-empty string or an array of them", { stop });
    }
    this.#stops = [...stops];
  }

  /** Adds generated text; returns the text that can be emitted, and whether a stop string ended it. */
  push(piece: string): { text: string; stopped: boolean } {
    const text = this.#held + piece;
    let at = -1;
    for (const stop of this.#stops) {
      const i = text.indexOf(stop);
      if (i >= 0 && (at < 0 || i < at)) at = i;
    }
    if (at >= 0) {
      this.#held = "";
      return { text: text.slice(0, at), stopped: true };
    }
    const hold = this.#partialMatch(text);
    this.#held = text.slice(text.length - hold);
    return { text: text.slice(0, text.length - hold), stopped: false };
  }

  /** The held-back text, once generation ended without a stop string. */
  flush(): string {
    const held = this.#held;
    this.#held = "";
    return held;
  }

  /** The length of the longest end of `text` that begins some stop string. */
  #partialMatch(text: string): number {
    for (let length = Math.min(text.length, this.#longest() - 1); length > 0; length--) {
      const tail = text.slice(text.length - length);
      if (this.#stops.some((stop) => stop.startsWith(tail))) return length;
    }
    return 0;
  }

  #longest(): number {
    return this.#stops.reduce((n, s) => Math.max(n, s.length), 0);
  }
}
