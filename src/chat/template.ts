/**
 * Chat templates: the GGUF's `tokenizer.chat_template` (Jinja) rendered with @huggingface/jinja,
 * in a worker thread with a deadline and a heap limit (./render-worker.ts).
 * @module
 */
import { Template } from "@huggingface/jinja";
import { BloomeryError } from "../errors.js";
import { resultsInCallOrder } from "./dsml.js";
import { detectToolCallFormat, type ToolCallFormat } from "./output.js";
import { renderAsync, renderSync, type RenderRequest } from "./render-worker.js";
import { adaptTemplate } from "./template-compat.js";
import type { ChatMessage, ChatTool } from "./types.js";

/** Options of {@link Model.applyChatTemplate}. */
export interface ApplyChatTemplateOptions {
  /** End with the opening of the assistant's turn (default true). */
  addGenerationPrompt?: boolean;
  /** Extra variables for the template, e.g. `{ enable_thinking: false }`. */
  templateKwargs?: Record<string, unknown>;
  /** Functions the model may call, given to the template as `tools`. */
  tools?: readonly ChatTool[];
}

/** The text of the special tokens a template may name. */
export interface TemplateTokens {
  bosToken: string;
  eosToken: string;
}

/**
 * A message as chat templates read it: OpenAI's field names (`tool_calls` with `function.name`
 * and `function.arguments` as an object, `tool_call_id`, `reasoning_content`), which is what
 * Hugging Face templates are written against.
 */
function templateMessage(message: ChatMessage, harmony: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = { role: message.role, content: message.content };
  if (message.reasoning !== undefined) out.reasoning_content = message.reasoning;
  // gpt-oss's template reads the reasoning as `thinking`, and a message that calls tools has no
  // content beside it (llama.cpp's common_chat_params_init_gpt_oss).
  if (harmony && message.reasoning !== undefined) {
    out.thinking = message.reasoning;
    if (message.toolCalls && message.toolCalls.length > 0) delete out.content;
  }
  if (message.toolCalls && message.toolCalls.length > 0) {
    out.tool_calls = message.toolCalls.map((call) => ({
      id: call.id,
      type: "function",
      function: { name: call.name, arguments: call.arguments },
    }));
  }
  if (message.toolCallId !== undefined) out.tool_call_id = message.toolCallId;
  if (message.name !== undefined) out.name = message.name;
  return out;
}

/**
 * A chat template, parsed once here (so a template that does not parse is refused when the model
 * loads) and rendered in a worker per request. Rendering is bounded by CHAT_TEMPLATE_LIMITS:
 * past them it throws BloomeryError CHAT_TEMPLATE_TOO_COMPLEX naming the limit; a template that
 * fails throws CHAT_TEMPLATE.
 */
export class ChatTemplate {
  /** What was rewritten for @huggingface/jinja to run the template (see template-compat.ts); empty for none. */
  readonly adaptations: readonly string[];
  /** The source the workers render: `source` with those rewrites. */
  readonly #rendered: string;
  /** The tool-call format the template teaches: harmony's and DeepSeek-V4's read messages their own way. */
  readonly #format: ToolCallFormat;

  constructor(readonly source: string) {
    const adapted = adaptTemplate(source);
    this.adaptations = adapted.changes;
    this.#rendered = adapted.source;
    this.#format = detectToolCallFormat(source);
    try {
      new Template(adapted.source);
    } catch (error) {
      // A RangeError is the parser's stack or a string's length running out: a limit, not a syntax error.
      const limit = error instanceof RangeError;
      throw new BloomeryError(
        limit ? "CHAT_TEMPLATE_TOO_COMPLEX" : "CHAT_TEMPLATE",
        `the model's chat template ${limit ? "is too deeply nested to parse" : "does not parse"}: ${(error as Error).message}`,
        {},
        { cause: error },
      );
    }
  }

  /** The prompt text for `messages`, blocking this thread while a worker renders it. */
  render(messages: readonly ChatMessage[], tokens: TemplateTokens, options: ApplyChatTemplateOptions = {}): string {
    return renderSync(this.#request(messages, tokens, options));
  }

  /** The prompt text for `messages`, rendered by a worker of the pool. */
  renderAsync(
    messages: readonly ChatMessage[],
    tokens: TemplateTokens,
    options: ApplyChatTemplateOptions = {},
  ): Promise<string> {
    return renderAsync(this.#request(messages, tokens, options));
  }

  #request(messages: readonly ChatMessage[], tokens: TemplateTokens, options: ApplyChatTemplateOptions): RenderRequest {
    const tools = options.tools && options.tools.length > 0 ? { tools: options.tools } : {};
    return {
      source: this.#rendered,
      context: {
        ...options.templateKwargs,
        ...tools,
        // DeepSeek-V4 reads tool results in call order (resultsInCallOrder).
        messages: (this.#format === "deepseek-v4" ? resultsInCallOrder(messages) : messages).map((message) =>
          templateMessage(message, this.#format === "harmony"),
        ),
        add_generation_prompt: options.addGenerationPrompt ?? true,
        bos_token: tokens.bosToken,
        eos_token: tokens.eosToken,
      },
    };
  }
}
