// POST /tokenize, /detokenize and /apply-template, with llama-server's fields. The work runs off
// the event loop (tokenizing and rendering on worker threads, pieces a slice at a time), so a
// long text does not hold up the other requests.
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import type { FastifyInstance } from "fastify";
import type { Model } from "../../../src/index.js";
import type { ServerContext } from "../context.js";
import { Fields } from "../fields.js";
import { openAiMessages } from "../messages.js";
import { readOpenAiTools } from "../tools.js";

export function registerTokenize(app: FastifyInstance, context: ServerContext): void {
  app.post("/tokenize", async (request) => {
    const f = new Fields(request.body);
    const content = f.string("content") ?? "";
    const addSpecial = f.boolean("add_special") ?? false;
    const parseSpecial = f.boolean("parse_special") ?? true;
    const withPieces = f.boolean("with_pieces") ?? false;
    f.finish();
    const model = context.model;
    const tokens = Array.from(await model.tokenizeAsync(content, { special: parseSpecial, addSpecial }));
    if (!withPieces) return { tokens };
    return { tokens: await withTokenPieces(model, tokens) };
  });

  app.post("/detokenize", async (request) => {
    const f = new Fields(request.body);
    const tokens = readTokens(f, "tokens", context.model.info.vocabSize) ?? [];
    f.finish();
    return { content: context.model.detokenize(tokens) };
  });

  app.post("/apply-template", async (request) => {
    const f = new Fields(request.body);
    const messages = openAiMessages(f.raw("messages"));
    const templateKwargs = context.templateKwargs(f.object("chat_template_kwargs"));
    const addGenerationPrompt = f.boolean("add_generation_prompt");
    const { tools, toolChoice } = readOpenAiTools(f);
    f.finish();
    const offered = toolChoice === "none" ? undefined : tools;
    return {
      prompt: await context.model.applyChatTemplateAsync(messages, {
        templateKwargs,
        addGenerationPrompt,
        tools: offered,
      }),
    };
  });
}

/** Tokens a slice of the pieces takes before the event loop gets a turn (a few milliseconds). */
const PIECES_PER_TURN = 4096;

/** Each token with its text, a slice at a time. */
async function withTokenPieces(model: Model, tokens: number[]): Promise<{ id: number; piece: string }[]> {
  const out: { id: number; piece: string }[] = [];
  for (let start = 0; start < tokens.length; start += PIECES_PER_TURN) {
    if (start > 0) await yieldToEventLoop();
    for (const id of tokens.slice(start, start + PIECES_PER_TURN)) {
      out.push({ id, piece: model.detokenize([id], { special: true }) });
    }
  }
  return out;
}

/** An array of token ids of the model's vocabulary. */
export function readTokens(f: Fields, name: string, vocabSize: number): number[] | undefined {
  const tokens = f.array(name);
  if (tokens?.some((t) => typeof t !== "number" || !Number.isInteger(t) || t < 0 || t >= vocabSize)) {
    throw f.bad(name, `must be an array of token ids below ${vocabSize}`);
  }
  return tokens as number[] | undefined;
}
