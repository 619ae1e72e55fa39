// POST /tokenize, /detokenize and /apply-template, with llama-server's fields.
import type { FastifyInstance } from "fastify";
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
    const tokens = Array.from(model.tokenize(content, { special: parseSpecial, addSpecial }));
    if (!withPieces) return { tokens };
    return { tokens: tokens.map((id) => ({ id, piece: model.detokenize([id], { special: true }) })) };
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
      prompt: context.model.applyChatTemplate(messages, { templateKwargs, addGenerationPrompt, tools: offered }),
    };
  });
}

/** An array of token ids of the model's vocabulary. */
export function readTokens(f: Fields, name: string, vocabSize: number): number[] | undefined {
  const tokens = f.array(name);
  if (tokens?.some((t) => typeof t !== "number" || !Number.isInteger(t) || t < 0 || t >= vocabSize)) {
    throw f.bad(name, `must be an array of token ids below ${vocabSize}`);
  }
  return tokens as number[] | undefined;
}
