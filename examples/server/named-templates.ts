// Chat formats --chat-template takes by name, as llama-server does: "chatml" always; without --jinja, the names of
// llama.cpp's built-in C++ formats (src/llama-chat.cpp), of which bloomery has those llama.cpp's server tests use,
// written as Jinja templates that render the same text. The other names are refused, never taken as template text.
import { UsageError } from "./options.js";

/** llama.cpp's ChatML template (common/chat.cpp's, character for character). */
const CHATML =
  "{%- for message in messages -%}\n" +
  "  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n" +
  "{%- endfor -%}\n" +
  "{%- if add_generation_prompt -%}\n" +
  "  {{- '<|im_start|>assistant\n' -}}\n" +
  "{%- endif -%}";

/** llama.cpp's built-in formats as Jinja: each message's content trimmed, as its C++ formats trim it. */
const BUILTIN_FORMATS: Record<string, string> = {
  llama3:
    "{%- for message in messages -%}" +
    "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' -}}" +
    "{%- endfor -%}" +
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}",
  "command-r":
    "{%- set tokens = {'system': '<|SYSTEM_TOKEN|>', 'user': '<|USER_TOKEN|>', 'assistant': '<|CHATBOT_TOKEN|>'} -%}" +
    "{%- for message in messages -%}{%- if message.role in tokens -%}" +
    "{{- '<|START_OF_TURN_TOKEN|>' + tokens[message.role] + message.content | trim + '<|END_OF_TURN_TOKEN|>' -}}" +
    "{%- endif -%}{%- endfor -%}" +
    "{%- if add_generation_prompt -%}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' -}}{%- endif -%}",
};

/** The names of llama.cpp's built-in formats (LLM_CHAT_TEMPLATES). */
const BUILTIN_NAMES = new Set(
  (
    "chatml llama2 llama2-sys llama2-sys-bos llama2-sys-strip mistral-v1 mistral-v3 mistral-v3-tekken mistral-v7 " +
    "mistral-v7-tekken phi3 phi4 falcon3 zephyr monarch gemma orion openchat vicuna vicuna-orca deepseek deepseek2 " +
    "deepseek3 deepseek-ocr command-r llama3 chatglm3 chatglm4 glmedge minicpm exaone3 exaone4 exaone-moe " +
    "rwkv-world granite granite-4.0 granite-4.1 gigachat megrez yandex bailing bailing-think bailing2 llama4 " +
    "smolvlm hunyuan-moe gpt-oss hunyuan-dense hunyuan-vl kimi-k2 seed_oss grok-2 pangu-embedded solar-open"
  ).split(" "),
);

/**
 * The template --chat-template `value` gives: llama.cpp's ChatML for "chatml"; with --jinja (bloomery's default)
 * any other text is the template itself, as llama-server takes it; without, a built-in format's name selects it.
 */
export function namedTemplate(value: string, jinja: boolean): string {
  if (value === "chatml") return CHATML;
  if (jinja || !BUILTIN_NAMES.has(value)) return value;
  const format = BUILTIN_FORMATS[value];
  if (format === undefined) {
    throw new UsageError(
      `--chat-template ${value} with --no-jinja names llama.cpp's built-in ${value} format, which bloomery-serve ` +
        `does not have (it has chatml, ${Object.keys(BUILTIN_FORMATS).join(", ")}): give the format as a Jinja ` +
        "template (--chat-template-file)",
    );
  }
  return format;
}
