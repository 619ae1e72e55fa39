// Prompts as llama-server reads them: text, token ids, a sequence mixing both, a JSON prompt object, or an array of
// several prompts (one result each).
import type { Model } from "../../src/index.js";
import { badField } from "./errors.js";
import { isObject } from "./fields.js";
import { promptTokens } from "./responses.js";

/** llama-server's JSON prompt: `{prompt_string, multimodal_data?}`. */
const PROMPT_STRING = "prompt_string";
const MULTIMODAL_DATA = "multimodal_data";

/**
 * The prompts of `value` (the request's `prompt`): one for text, tokens, a mixed sequence or a JSON prompt; one per
 * element for an array of those (an array holding a bare token id is one mixed sequence, as llama-server reads it).
 */
export async function readPrompts(model: Model, value: unknown, field = "prompt"): Promise<number[][]> {
  if (Array.isArray(value) && value.length > 0 && !value.some((v) => typeof v === "number")) {
    return Promise.all(value.map((prompt, i) => readOne(model, prompt, `${field}[${i}]`)));
  }
  return [await readOne(model, value, field)];
}

/** One prompt's tokens, tokenized on worker threads. */
async function readOne(model: Model, value: unknown, field: string): Promise<number[]> {
  const vocabSize = model.info.vocabSize;
  if (typeof value === "string") return promptTokens(model, value);
  if (isObject(value)) {
    if (value[MULTIMODAL_DATA] !== undefined) {
      throw badField(`${field}.${MULTIMODAL_DATA}`, "cannot be used: bloomery-serve does not take images or audio");
    }
    const unknown = Object.keys(value).filter((key) => key !== PROMPT_STRING);
    if (typeof value[PROMPT_STRING] !== "string" || unknown.length > 0) {
      throw badField(field, `as an object must be {"${PROMPT_STRING}": text}`);
    }
    return promptTokens(model, value[PROMPT_STRING]);
  }
  if (Array.isArray(value) && value.length > 0) {
    // A sequence of token ids and texts: each text tokenized in place, with BOS only when it comes first. The ids
    // are checked in one loop, not a promise each (4,100 ids took 2-4 ms that way on a 2-core host, before the
    // request's first token).
    value.forEach((piece, i) => {
      if (typeof piece === "string") return;
      if (!Number.isInteger(piece) || (piece as number) < 0 || (piece as number) >= vocabSize)
        throw badField(`${field}[${i}]`, `must be a token id below ${vocabSize} or a text`);
    });
    if (!value.some((piece) => typeof piece === "string")) return value as number[];
    const pieces = await Promise.all(
      value.map(async (piece, i) =>
        typeof piece === "string"
          ? Array.from(await model.tokenizeAsync(piece, { special: true, addSpecial: i === 0 }))
          : [piece as number],
      ),
    );
    return pieces.flat();
  }
  throw badField(field, "must be a text, an array of token ids and texts, a JSON prompt object, or an array of those");
}
