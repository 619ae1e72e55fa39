// POST /tokenize, /detokenize and /apply-template, with llama-server's fields. The work runs off
// the event loop (tokenizing and rendering on worker threads, pieces a slice at a time), so a
// long text does not hold up the other requests.
import { Readable } from "node:stream";
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import type { FastifyInstance } from "fastify";
import type { Model } from "../../../src/index.js";
import { chatKwargs, checkJinja, readChatShape, renderChatText } from "../chat-request.js";
import type { ServerContext } from "../context.js";
import { Fields } from "../fields.js";
import { openAiMessages } from "../messages.js";
import { readOpenAiTools } from "../tools.js";

export function registerTokenize(app: FastifyInstance, context: ServerContext): void {
  app.post("/tokenize", async (request, reply) => {
    const f = new Fields(request.body);
    // A long content stays the body's UTF-8 bytes (see body.ts): it is never a string here.
    const content = f.text("content") ?? "";
    const addSpecial = f.boolean("add_special") ?? false;
    const parseSpecial = f.boolean("parse_special") ?? true;
    const withPieces = f.boolean("with_pieces") ?? false;
    f.finish();
    const model = context.model;
    const tokens = await model.tokenizeAsync(content, { special: parseSpecial, addSpecial });
    // Written as JSON here, a slice at a time, each sent as it is written: a long text's response
    // is megabytes, which one string (and its UTF-8 for the socket) would write in one turn.
    const json = withPieces ? piecesJson(model, tokens) : idsJson(tokens);
    return reply.type("application/json").send(Readable.from(json, { objectMode: false }));
  });

  app.post("/detokenize", async (request) => {
    const f = new Fields(request.body);
    const tokens = readTokens(f, "tokens", context.model.info.vocabSize) ?? [];
    f.finish();
    return { content: context.model.detokenize(tokens) };
  });

  // llama-server answers the prompt its chat endpoints would run: the same template variables, reasoning edits
  // and prefill as POST /v1/chat/completions.
  app.post("/apply-template", async (request) => {
    const f = new Fields(request.body);
    const messages = openAiMessages(f.raw("messages"));
    const { tools, toolChoice } = readOpenAiTools(f);
    const offered = toolChoice === "none" ? undefined : tools;
    checkJinja(context, offered);
    const templateKwargs = chatKwargs(context, offered, f.object("chat_template_kwargs"));
    const shape = readChatShape(f, messages);
    f.finish();
    return { prompt: await renderChatText(context, shape, offered, templateKwargs) };
  });
}

/** Tokens whose pieces are written before the event loop gets a turn (a few milliseconds' work). */
const PIECES_PER_TURN = 4096;

/** Token ids written before the event loop gets a turn (a few milliseconds' work). */
const IDS_PER_TURN = 65536;

/** `{"tokens":[id, ...]}`, written a slice of tokens at a time. */
async function* idsJson(tokens: Uint32Array): AsyncGenerator<Buffer> {
  yield* jsonSlices(tokens, IDS_PER_TURN, (slice) => slice.join(","));
}

/** `{"tokens":[{"id","piece"}, ...]}`, written a slice of tokens at a time. */
async function* piecesJson(model: Model, tokens: Uint32Array): AsyncGenerator<Buffer> {
  yield* jsonSlices(tokens, PIECES_PER_TURN, (slice) => {
    const pieces = Array.from(slice, (id) => ({ id, piece: model.detokenize([id], { special: true }) }));
    return JSON.stringify(pieces).slice(1, -1);
  });
}

/** `{"tokens":[...]}` of the tokens' slices as `write` writes them, a slice a turn. */
async function* jsonSlices(
  tokens: Uint32Array,
  perTurn: number,
  write: (slice: Uint32Array) => string,
): AsyncGenerator<Buffer> {
  yield Buffer.from('{"tokens":[');
  for (let start = 0; start < tokens.length; start += perTurn) {
    if (start > 0) await yieldToEventLoop();
    yield Buffer.from((start > 0 ? "," : "") + write(tokens.subarray(start, start + perTurn)));
  }
  yield Buffer.from("]}");
}

/** An array of token ids of the model's vocabulary. */
export function readTokens(f: Fields, name: string, vocabSize: number): number[] | undefined {
  const tokens = f.array(name);
  if (tokens?.some((t) => typeof t !== "number" || !Number.isInteger(t) || t < 0 || t >= vocabSize)) {
    throw f.bad(name, `must be an array of token ids below ${vocabSize}`);
  }
  return tokens as number[] | undefined;
}
