/**
 * Chat templates: the GGUF's `tokenizer.chat_template` (Jinja) rendered with @huggingface/jinja.
 * @module
 */
import { Template } from "@huggingface/jinja";
import { BloomeryError } from "../errors.js";
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
function templateMessage(message: ChatMessage): Record<string, unknown> {
  const out: Record<string, unknown> = { role: message.role, content: message.content };
  if (message.reasoning !== undefined) out.reasoning_content = message.reasoning;
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

/** A parsed chat template, rendered once per request. */
export class ChatTemplate {
  readonly #template: Template;
  /** What was rewritten for @huggingface/jinja to run the template (see template-compat.ts); empty for none. */
  readonly adaptations: readonly string[];

  constructor(readonly source: string) {
    const adapted = adaptTemplate(source);
    this.adaptations = adapted.changes;
    try {
      this.#template = new Template(adapted.source);
    } catch (error) {
      throw new BloomeryError(
        "CHAT_TEMPLATE",
        `the model's chat template does not parse: ${(error as Error).message}`,
        {},
        { cause: error },
      );
    }
  }

  /** The prompt text for `messages`. */
  render(messages: readonly ChatMessage[], tokens: TemplateTokens, options: ApplyChatTemplateOptions = {}): string {
    const tools = options.tools && options.tools.length > 0 ? { tools: options.tools } : {};
    try {
      return this.#template.render({
        ...options.templateKwargs,
        ...tools,
        messages: messages.map(templateMessage),
        add_generation_prompt: options.addGenerationPrompt ?? true,
        bos_token: tokens.bosToken,
        eos_token: tokens.eosToken,
      });
    } catch (error) {
      throw new BloomeryError(
        "CHAT_TEMPLATE",
        `the model's chat template failed: ${(error as Error).message}`,
        {},
        { cause: error },
      );
    }
  }
}
