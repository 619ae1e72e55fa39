/**
 * DeepSeek's tool calls: a section of calls between its special tokens,
 * `<｜tool▁calls▁begin｜>` (`<｜tool▁call▁begin｜>` CALL `<｜tool▁call▁end｜>`)+ `<｜tool▁calls▁end｜>`, where a
 * call is `NAME<｜tool▁sep｜>{json}` in DeepSeek-V3.1, and `function<｜tool▁sep｜>NAME` then the
 * arguments in a json code fence in DeepSeek-R1 and DeepSeek-V3 (0324).
 * @module
 */
import { argumentsFromJson } from "./tool-call-values.js";
import { sectionOfCalls, type BlockCall, type BlockTags, type ToolCallBlock } from "./tagged-tool-calls.js";

export const DEEPSEEK_SECTION: BlockTags = { open: "<｜tool▁calls▁begin｜>", close: "<｜tool▁calls▁end｜>" };
export const DEEPSEEK_CALL_BEGIN = "<｜tool▁call▁begin｜>";
export const DEEPSEEK_CALL_END = "<｜tool▁call▁end｜>";
export const DEEPSEEK_SEP = "<｜tool▁sep｜>";

/** A section of calls, each read by `readCall`. */
function section(readCall: (body: string) => BlockCall | undefined): ToolCallBlock {
  return sectionOfCalls(DEEPSEEK_CALL_BEGIN, DEEPSEEK_CALL_END, readCall);
}

function validName(name: string): boolean {
  return name.length > 0 && !/[\s<>｜]/.test(name);
}

/** DeepSeek-V3.1: `NAME<｜tool▁sep｜>{json}`. */
export const parseDeepSeekV31Section: ToolCallBlock = section((body) => {
  const sep = body.indexOf(DEEPSEEK_SEP);
  if (sep < 0) return undefined;
  const name = body.slice(0, sep).trim();
  const args = argumentsFromJson(body.slice(sep + DEEPSEEK_SEP.length));
  return validName(name) && args ? { name, arguments: args } : undefined;
});

const R1_CALL = /^function<｜tool▁sep｜>([^\n]*)\n```json\s*([\s\S]*?)\s*```$/;

/** DeepSeek-R1 and V3: ``function<｜tool▁sep｜>NAME\n```json\n{json}\n``` ``. */
export const parseDeepSeekR1Section: ToolCallBlock = section((body) => {
  const match = R1_CALL.exec(body.trim());
  if (!match) return undefined;
  const name = match[1]!.trim();
  const args = argumentsFromJson(match[2]!);
  return validName(name) && args ? { name, arguments: args } : undefined;
});
