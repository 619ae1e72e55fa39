/**
 * Built-in chat templates, used when a model file has none.
 * @module
 */

/** The names of the built-in templates. */
export type BuiltinTemplateName = "chatml";

/**
 * ChatML (`<|im_start|>role\n...<|im_end|>`), with tools offered in the system turn and called
 * as Hermes does (`<tool_call>{"name", "arguments"}</tool_call>`), and tool results in a user
 * turn as `<tool_response>` blocks: the layout Qwen2.5 and Hermes models were trained on.
 */
const CHATML = `{%- if tools -%}
{{- '<|im_start|>system\\n' -}}
{%- if messages[0].role == 'system' -%}{{- messages[0].content + '\\n\\n' -}}{%- endif -%}
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' -}}
{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' -}}
{%- elif messages[0].role == 'system' -%}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' and loop.first -%}
{%- elif message.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}
{%- elif message.tool_calls -%}
{{- '<|im_start|>' + message.role -}}
{%- if message.content -%}{{- '\\n' + message.content -}}{%- endif -%}
{%- for call in message.tool_calls -%}
{{- '\\n<tool_call>\\n{"name": "' + call.function.name + '", "arguments": ' + (call.function.arguments | tojson) + '}\\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\\n' -}}
{%- else -%}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}`;

/** The Jinja source of a built-in template. */
export const BUILTIN_TEMPLATES: Record<BuiltinTemplateName, string> = { chatml: CHATML };
