/**
 * Chat templates: the GGUF's `tokenizer.chat_template` (Jinja) rendered with @huggingface/jinja.
 * @module
 */
import { Template } from "@huggingface/jinja";
import { BloomeryError } from "../errors.js";

/** One message of a conversation. */
export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool" | (string & {});
  content: string;
}

/** Options of {@link Model.applyChatTemplate}. */
export interface ApplyChatTemplateOptions {
  /** End with the opening of the assistant's turn (default true). */
  addGenerationPrompt?: boolean;
  /** Extra variables for the template, e.g. `{ enable_thinking: false }`. */
  templateKwargs?: Record<string, unknown>;
}

/** The text of the special tokens a template may name. */
export interface TemplateTokens {
  bosToken: string;
  eosToken: string;
}

/** A parsed chat template, rendered once per request. */
export class ChatTemplate {
  readonly #template: Template;

  constructor(readonly source: string) {
    try {
      this.#template = new Template(source);
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
    try {
      return this.#template.render({
        ...options.templateKwargs,
        messages,
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
