/**
 * Jinja that chat templates use and @huggingface/jinja cannot run, rewritten into equivalents it
 * can: Python's `list.append` and `list.pop` on a namespace's list (Kimi-K2's templates queue
 * their tool-call ids this way). Each rewrite is reported, so that the model can say the template
 * it renders is not byte for byte the file's.
 * @module
 */

/** A template's source as rendered, and what was rewritten in it. */
export interface AdaptedTemplate {
  source: string;
  /** One line per kind of rewrite made; empty when the template is used as it is. */
  changes: string[];
}

// A namespace's attribute (`ns.ids`): assigning it changes the namespace, in a loop or a macro
// as well, as appending to the list in place does. Plain variables are left alone: a `set` in a
// loop would not outlive the iteration.
const LIST = String.raw`[A-Za-z_]\w*\.[A-Za-z_]\w*`;
const NAME = String.raw`[A-Za-z_]\w*`;
// `{%- set _ = ns.ids.append(value) -%}` (a value without parentheses or tag ends).
const APPEND = new RegExp(String.raw`\{%(-?)\s*set\s+${NAME}\s*=\s*(${LIST})\.append\(([^()%]*)\)\s*(-?)%\}`, "g");
// `{%- set id = ns.ids.pop(0) -%}` and `{%- set id = ns.ids.pop() -%}`.
const POP = new RegExp(String.raw`\{%(-?)\s*set\s+(${NAME})\s*=\s*(${LIST})\.pop\((0?)\)\s*(-?)%\}`, "g");

/** `source` with list.append / list.pop on namespace attributes rewritten as assignments. */
export function adaptTemplate(source: string): AdaptedTemplate {
  const changes: string[] = [];
  let adapted = source.replace(APPEND, (_, open: string, list: string, value: string, close: string) => {
    return `{%${open} set ${list} = ${list} + [${value.trim()}] ${close}%}`;
  });
  if (adapted !== source) changes.push("list.append(x) on a namespace's list, as `set ns.list = ns.list + [x]`");
  const appended = adapted;
  adapted = adapted.replace(POP, (_, open: string, name: string, list: string, first: string, close: string) => {
    const [item, rest] = first ? ["[0]", "[1:]"] : ["[-1]", "[:-1]"];
    return `{%${open} set ${name} = ${list}${item} -%}{%- set ${list} = ${list}${rest} ${close}%}`;
  });
  if (adapted !== appended) changes.push("list.pop() on a namespace's list, as an index and a slice");
  return { source: adapted, changes };
}
