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
 * (loadModel's `draftModel`), drafting greedily.
 */
export type DraftSource = "ngram" | "model";

/** Drafts in detail. */
export interface DraftSettings {
  source: DraftSource;
  /** The most tokens drafted for one pass (default 16, at most 64). */
  max?: number;
  /** A draft shorter than this is not verified (default 0; llama-server's `--draft-min`). */
  min?: number;
  /**
   * `"model"` drafts: the draft ends before a token the draft model gives less probability than this (default 0;
   * llama-server's `--draft-p-min`).
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
 * `draftModel`, else none; a {@link DraftSource} or {@link DraftSettings}. `"mtp"` (a model's own
 * next-token-prediction layers) is refused (DRAFT_UNSUPPORTED): bloomery does not run them yet.
 */
export type DraftOption = false | "off" | "auto" | "mtp" | DraftSource | DraftSettings;

/** What the addon takes: engine::DraftOptions. @internal */
export interface NativeDraftOptions {
  source: DraftSource;
  max?: number;
  min?: number;
  pMin?: number;
  adaptive?: boolean;
  ngramMax?: number;
  ngramMin?: number;
}

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
 * Throws INVALID_ARGUMENT for an option it does not know, DRAFT_UNSUPPORTED for `"mtp"` and for
 * `"model"` without a draft model. @internal
 */
export function resolveDraft(option: unknown, hasDraftModel: boolean): NativeDraftOptions | undefined {
  if (option === undefined || option === "auto") return hasDraftModel ? { source: "model" } : undefined;
  if (option === false || option === "off") return undefined;
  if (option === "mtp") {
    throw new BloomeryError(
      "DRAFT_UNSUPPORTED",
      'draft "mtp": bloomery does not run a model\'s next-token-prediction layers yet; use "ngram" or "model"',
      { draft: option },
    );
  }
  const settings: DraftSettings | undefined =
    option === "ngram" || option === "model"
      ? { source: option }
      : typeof option === "object" && option !== null && !Array.isArray(option)
        ? (option as DraftSettings)
        : undefined;
  if (!settings) {
    throw new BloomeryError(
      "INVALID_ARGUMENT",
      'draft must be false, "off", "auto", "ngram", "model" or { source, max?, min?, pMin?, adaptive? }',
      { draft: option },
    );
  }
  checkOptions(settings, SETTINGS, "draft");
  if (settings.source !== "ngram" && settings.source !== "model") {
    throw new BloomeryError("INVALID_ARGUMENT", 'draft.source must be "ngram" or "model"', { source: settings.source });
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
