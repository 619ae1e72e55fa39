// A chat request as the OpenAI-style endpoints read it (chat completions and the Responses API): the conversation,
// its prompt as llama-server renders it, and the options Session.chat runs it with.
import type { ChatMessage } from "../../src/index.js";
import type { ServerContext } from "./context.js";
import { badField } from "./errors.js";
import type { Fields } from "./fields.js";
import { promptTokens } from "./responses.js";
import type { ToolOptions } from "./tools.js";

export interface ChatPrompt {
  messages: ChatMessage[];
  /** The rendered prompt's tokens and text. */
  prompt: number[];
  text: string;
  /** llama-server's assistant prefill: the final assistant message's text, which the answer continues. */
  prefill?: string;
  templateKwargs?: Record<string, unknown>;
}

/**
 * The months as strftime's %b writes them in llama.cpp's C locale. (toLocaleString's first call
 * loads ICU's calendar data: 20 ms of the event loop, in the first chat after the start.)
 */
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/** "%d %b %Y" and "%b %d %Y" of today, as llama.cpp gives templates their date. */
function today(): { date_string: string; datetime: string } {
  const now = new Date();
  const day = String(now.getDate()).padStart(2, "0");
  const month = MONTHS[now.getMonth()]!;
  return { date_string: `${day} ${month} ${now.getFullYear()}`, datetime: `${month} ${day} ${now.getFullYear()}` };
}

/**
 * The template variables of a chat: llama.cpp's extra context (today's `date_string` and `datetime`, the tools as
 * `functions` JSON, as the Llama 3.x and FireFunction templates read them), enable_thinking (false with --reasoning
 * off, else true: llama-server sets it for every template, true under "auto" where the template can think, and
 * only such a template reads it), then the server's --chat-template-kwargs and the request's own.
 */
export function chatKwargs(
  context: ServerContext,
  tools: ToolOptions["tools"],
  request: Record<string, unknown> | undefined,
): Record<string, unknown> {
  const reasoning = context.config.reasoning;
  return {
    ...today(),
    functions: JSON.stringify(tools ?? [], null, 2),
    enable_thinking: reasoning !== "off",
    ...context.templateKwargs(request),
  };
}

/** How a chat's prompt ends, as the request's fields ask: with a generation prompt, or as a prefill. */
export interface ChatShape {
  /** The messages the template renders (without a prefill's final assistant message). */
  shown: ChatMessage[];
  /** llama-server's assistant prefill: the final assistant message's text, which the answer continues. */
  prefill?: string;
  addGenerationPrompt: boolean;
}

/**
 * How llama-server renders `messages`: it refuses two assistant messages in a row; a final assistant message is a
 * prefill (the prompt ends with its text, which the answer continues) unless `add_generation_prompt` is false
 * without `continue_final_message`.
 */
export function readChatShape(f: Fields, messages: ChatMessage[]): ChatShape {
  messages.forEach((message, i) => {
    if (i > 0 && message.role === "assistant" && messages[i - 1]!.role === "assistant") {
      throw badField(`messages[${i}]`, "is a second assistant message in a row: merge them into one");
    }
  });
  const addGenerationPrompt = f.boolean("add_generation_prompt");
  const continueFinal = f.boolean("continue_final_message") ?? false;
  if (continueFinal && addGenerationPrompt === true) {
    throw badField("continue_final_message", "cannot be used together with add_generation_prompt: true");
  }
  const last = messages.at(-1);
  const prefill = last?.role === "assistant" && (continueFinal || addGenerationPrompt !== false);
  return {
    shown: prefill ? messages.slice(0, -1) : messages,
    ...(prefill ? { prefill: last!.content } : {}),
    addGenerationPrompt: prefill || addGenerationPrompt !== false,
  };
}

/**
 * The prompt text of a chat in `shape`, rendered on a worker thread, as llama-server renders it for every chat
 * endpoint and /apply-template: where enable_thinking is false (--reasoning off, or the request's
 * chat_template_kwargs), a think block the template leaves open is closed (as llama.cpp closes DeepSeek-R1's and
 * QwQ's); a prefill's text ends it.
 */
export async function renderChatText(
  context: ServerContext,
  shape: ChatShape,
  tools: ToolOptions["tools"],
  templateKwargs: Record<string, unknown>,
): Promise<string> {
  let text = await context.model.applyChatTemplateAsync(shape.shown, {
    templateKwargs,
    ...(tools ? { tools } : {}),
    addGenerationPrompt: shape.addGenerationPrompt,
  });
  if (templateKwargs.enable_thinking === false) text = closeOpenThinking(text);
  if (shape.prefill !== undefined) text += shape.prefill;
  return text;
}

/** The prompt of `messages` in `shape` (renderChatText's), tokenized on a worker thread. */
export async function renderChat(
  context: ServerContext,
  messages: ChatMessage[],
  shape: ChatShape,
  tools: ToolOptions["tools"],
  templateKwargs: Record<string, unknown>,
): Promise<ChatPrompt> {
  const text = await renderChatText(context, shape, tools, templateKwargs);
  return {
    messages,
    prompt: await promptTokens(context.model, text),
    text,
    templateKwargs,
    ...(shape.prefill !== undefined ? { prefill: shape.prefill } : {}),
  };
}

/** Think blocks a prompt may end inside, with the text that closes each (llama.cpp's, per format). */
const OPEN_THINKING: [string, string][] = [
  ["<think>\n", "</think>"],
  ["<|START_THINKING|>", "<|END_THINKING|>"],
];

function closeOpenThinking(text: string): string {
  for (const [open, close] of OPEN_THINKING) if (text.endsWith(open)) return text + close;
  // Command R7B's turn opens no think block; llama.cpp adds an empty one when reasoning is off.
  if (text.endsWith("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>")) return text + "<|START_THINKING|><|END_THINKING|>";
  return text;
}

/** Refuses tools on a server started with --no-jinja, as llama-server does. */
export function checkJinja(context: ServerContext, tools: ToolOptions["tools"]): void {
  if (context.config.jinja === false && tools && tools.length > 0) {
    throw badField("tools", "needs the server started without --no-jinja (llama-server's rule: tools need --jinja)");
  }
}
