// Reading a JSON request body field by field. Every field a route reads is marked as known; any
// other field is refused by name, so nothing a client asks for is silently ignored. A field sent
// as null counts as absent, as OpenAI's API treats it.
import { textBytes } from "./body.js";
import { badField, HttpError } from "./errors.js";

export type JsonObject = Record<string, unknown>;

export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

interface Range {
  min?: number;
  max?: number;
}

export class Fields {
  readonly #body: JsonObject;
  readonly #known = new Set<string>();

  /** `prefix` names where the object sits in the request (e.g. "messages[2]."), for error messages. */
  constructor(
    body: unknown,
    readonly prefix = "",
  ) {
    if (!isObject(body)) {
      throw prefix
        ? badField(prefix.replace(/\.$/, ""), "must be an object")
        : new HttpError(400, "the request body must be a JSON object");
    }
    this.#body = body;
  }

  /** The field's value, or undefined when it is absent or null. */
  raw(name: string): unknown {
    this.#known.add(name);
    const value = Object.hasOwn(this.#body, name) ? this.#body[name] : undefined;
    return value === null ? undefined : value;
  }

  has(name: string): boolean {
    return this.raw(name) !== undefined;
  }

  string(name: string): string | undefined {
    const value = this.raw(name);
    if (value !== undefined && typeof value !== "string") throw this.bad(name, "must be a string");
    return value;
  }

  /**
   * A string field, as its UTF-8 bytes when the body parser holds it so (a long string of a large
   * body, see body.ts), for a consumer that takes text as UTF-8: the string is then never made.
   */
  text(name: string): string | Uint8Array | undefined {
    this.#known.add(name);
    return textBytes(this.#body, name) ?? this.string(name);
  }

  boolean(name: string): boolean | undefined {
    const value = this.raw(name);
    if (value !== undefined && typeof value !== "boolean") throw this.bad(name, "must be a boolean");
    return value;
  }

  number(name: string, range: Range = {}): number | undefined {
    const value = this.raw(name);
    if (value === undefined) return undefined;
    if (typeof value !== "number" || !Number.isFinite(value)) throw this.bad(name, "must be a finite number");
    return this.#inRange(name, value, range);
  }

  integer(name: string, range: Range = {}): number | undefined {
    const value = this.raw(name);
    if (value === undefined) return undefined;
    if (typeof value !== "number" || !Number.isSafeInteger(value)) throw this.bad(name, "must be an integer");
    return this.#inRange(name, value, range);
  }

  array(name: string): unknown[] | undefined {
    const value = this.raw(name);
    if (value !== undefined && !Array.isArray(value)) throw this.bad(name, "must be an array");
    return value;
  }

  object(name: string): JsonObject | undefined {
    const value = this.raw(name);
    if (value !== undefined && !isObject(value)) throw this.bad(name, "must be an object");
    return value;
  }

  /** A string, or an array of strings (as `stop` is sent). */
  strings(name: string): string[] | undefined {
    const value = this.raw(name);
    if (value === undefined) return undefined;
    if (typeof value === "string") return [value];
    if (!Array.isArray(value) || value.some((s) => typeof s !== "string")) {
      throw this.bad(name, "must be a string or an array of strings");
    }
    return value as string[];
  }

  /**
   * A field bloomery does not support yet, accepted only with the value that asks for nothing
   * (e.g. `n: 1`, `logprobs: false`); any other value is refused by name.
   */
  unsupported(name: string, accepts: (value: unknown) => boolean = () => false): void {
    const value = this.raw(name);
    if (value !== undefined && !accepts(value)) throw this.bad(name, "is not supported by bloomery-serve yet");
  }

  /** Refuses the fields no reader asked for. Call after reading every field. */
  finish(): void {
    const unknown = Object.keys(this.#body).filter((key) => !this.#known.has(key));
    if (unknown.length > 0) {
      const names = unknown.map((key) => `'${this.prefix}${key}'`).join(", ");
      throw new HttpError(400, `unsupported field${unknown.length > 1 ? "s" : ""}: ${names}`);
    }
  }

  bad(name: string, message: string): HttpError {
    return badField(this.prefix + name, message);
  }

  #inRange(name: string, value: number, { min, max }: Range): number {
    if (min !== undefined && value < min) throw this.bad(name, `must be at least ${min}`);
    if (max !== undefined && value > max) throw this.bad(name, `must be at most ${max}`);
    return value;
  }
}

/** A copy of `value` without `keys`. */
export function withoutKeys<T extends object, K extends keyof T>(value: T, keys: readonly K[]): Omit<T, K> {
  const copy = { ...value };
  for (const key of keys) delete copy[key];
  return copy;
}
