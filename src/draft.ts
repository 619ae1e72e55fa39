/**
 * Speculative decoding's options: which source drafts the next tokens of a generation, and how
 * many. The engine verifies a draft in the same pass as the token before it and keeps it as far
 * as the session's sampler draws the same tokens (native/engine/draft.h), so the tokens of a run
 * are those it gives without drafts, greedy or sampled.
 * @module
 */
import { BloomeryError } from "./errors.js";
import { checkOptions, optionKeys } from "./validate.js";

/**
 * Where drafts come from: `"ngram"`, the tokens that followed the latest earlier occurrence of
 * the context's last few tokens (no extra model: strong when the output quotes or edits the
 * prompt, as code edits do); `"model"`, a small draft model with the same vocabulary
 * (loadModel's `draftModel`), drafting greedily; `"mtp"`, the model's own next-token-prediction
 * layer (GLM-4.5+, DeepSeek-V3/V4, MiMo-V2 and Qwen3.5/3.6 files carry one: `nextn_predict_layers`;
 * DeepSeek-V4's takes the model's hyper-connection streams), chained for several tokens, as
 * llama.cpp's draft-mtp runs it (on the CPU, beside a model on the GPU too, from the normed hidden
 * states its passes return; refused with DRAFT_UNSUPPORTED for a file without one, and on the GPU
 * for MiMo-V2's, which takes the hidden states before the output norm). An `"mtp"` generation
 * reuses only the prefix of its prompt that the session's MTP layer holds too (not a prefix from
 * the prompt-state cache or a restored state): the rest is evaluated again.
 */
export type DraftSource = "ngram" | "model" | "mtp";

/** Drafts in detail. */
export interface DraftSettings {
  source: DraftSource;
  /** The most tokens drafted for one pass (default 16, at most 64). */
  max?: number;
  /** A draft shorter than this is not verified (default 0; llama-server's `--draft-min`). */
  min?: number;
  /**
   * `"model"` and `"mtp"` drafts: the draft ends before a token the drafter gives less probability than this
   * (default 0; llama-server's `--draft-p-min`).
   */
  pMin?: number;
  /**
   * `true` (default): the width follows cost: the engine measures what passes of each width cost and how many drafted
   * tokens the sampler keeps, and drafts the number of tokens that gives the most tokens per second (none when drafts
   * do not pay, then tries one now and then). `false`: always `max` (where the source has that many).
   */
  adaptive?: boolean;
  /** `"ngram"` drafts: the longest n-gram looked up (default 4). */
  ngramMax?: number;
  /** `"ngram"` drafts: the shortest (default 2). */
  ngramMin?: number;
}

/**
 * The `draft` option of {@link loadModel} (the default of every run) and of one generation or chat:
 * `false` or `"off"`: no drafts; `"auto"` (loadModel's default): `"model"` when loadModel was given a
 * `draftModel`, else none; a {@link DraftSource} or {@link DraftSettings}.
 */
export type DraftOption = false | "off" | "auto" | DraftSource | DraftSettings;

/** What the addon takes (engine::DraftOptions): the settings, checked. @internal */
export type NativeDraftOptions = DraftSettings;

/** engine::kMaxDraft and kDefaultDraftMax. */
const MAX_DRAFT = 64;
const DEFAULT_DRAFT_MAX = 16;

const SETTINGS = optionKeys<DraftSettings>()({
  source: true,
  max: true,
  min: true,
  pMin: true,
  adaptive: true,
  ngramMax: true,
  ngramMin: true,
});

/**
 * The drafts `option` asks for, undefined for none; `hasDraftModel`: loadModel was given one.
 * Throws INVALID_ARGUMENT for an option it does not know, DRAFT_UNSUPPORTED for `"model"` without a
 * draft model (the engine refuses `"mtp"` where the model cannot run it). @internal
 */
export function resolveDraft(option: unknown, hasDraftModel: boolean): NativeDraftOptions | undefined {
  if (option === undefined || option === "auto") return hasDraftModel ? { source: "model" } : undefined;
  if (option === false || option === "off") return undefined;
  const settings: DraftSettings | undefined =
    option === "ngram" || option === "model" || option === "mtp"
      ? { source: option }
      : typeof option === "object" && option !== null && !Array.isArray(option)
        ? (option as DraftSettings)
        : undefined;
  if (!settings) {
    throw new BloomeryError(
      "INVALID_ARGUMENT",
      'draft must be false, "off", "auto", "ngram", "model", "mtp" or { source, max?, min?, pMin?, adaptive? }',
      { draft: option },
    );
  }
  checkOptions(settings, SETTINGS, "draft");
  if (settings.source !== "ngram" && settings.source !== "model" && settings.source !== "mtp") {
    throw new BloomeryError("INVALID_ARGUMENT", 'draft.source must be "ngram", "model" or "mtp"', {
      source: settings.source,
    });
  }
  if (settings.source === "model" && !hasDraftModel) {
    throw new BloomeryError("DRAFT_UNSUPPORTED", "model drafts need a draft model: loadModel's draftModel option");
  }
  for (const key of ["max", "min", "ngramMax", "ngramMin"] as const) {
    const value = settings[key];
    if (value !== undefined && (!Number.isInteger(value) || value < 0)) {
      throw new BloomeryError("INVALID_ARGUMENT", `draft.${key} must be a non-negative integer`, { [key]: value });
    }
  }
  if ((settings.max ?? 0) > MAX_DRAFT) {
    throw new BloomeryError("INVALID_ARGUMENT", `draft.max must be at most ${MAX_DRAFT}`, { max: settings.max });
  }
  if ((settings.min ?? 0) > (settings.max ?? DEFAULT_DRAFT_MAX)) {
    throw new BloomeryError("INVALID_ARGUMENT", "draft.min must be at most draft.max", { min: settings.min });
  }
  if (settings.pMin !== undefined && !(typeof settings.pMin === "number" && settings.pMin >= 0 && settings.pMin <= 1)) {
    throw new BloomeryError("INVALID_ARGUMENT", "draft.pMin must be a number from 0 to 1", { pMin: settings.pMin });
  }
  if (settings.adaptive !== undefined && typeof settings.adaptive !== "boolean") {
    throw new BloomeryError("INVALID_ARGUMENT", "draft.adaptive must be a boolean", { adaptive: settings.adaptive });
  }
  return { ...settings };
}
