// bloomery-serve's API keys (issue 17, finding 4): an empty or blank key, from --api-key, LLAMA_API_KEY or a
// key file, once turned authentication off and the server answered everyone. Now it refuses to start, naming
// where the key came from; real keys are checked on every request but the public ones.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createApp } from "../examples/server/app.js";
import { parseServeOptions, UsageError } from "../examples/server/options.js";
import { exitWithin, spawnServe } from "./server-helpers.js";

const folder = mkdtempSync(join(tmpdir(), "bloomery-keys-"));
const keyFile = (name: string, text: string) => {
  const path = join(folder, name);
  writeFileSync(path, text);
  return path;
};

/** Each way of asking for an empty key, with the name the refusal must give. */
const EMPTY_KEYS: { case: string; args: string[]; env: Record<string, string>; names: RegExp }[] = [
  { case: "--api-key ''", args: ["--api-key", ""], env: {}, names: /--api-key is empty/ },
  { case: "--api-key ' , '", args: ["--api-key", " , "], env: {}, names: /--api-key " , " holds an empty API key/ },
  { case: "--api-key=a,,b", args: ["--api-key=a,,b"], env: {}, names: /--api-key "a,,b" holds an empty API key/ },
  { case: "LLAMA_API_KEY=''", args: [], env: { LLAMA_API_KEY: "" }, names: /LLAMA_API_KEY is empty/ },
  {
    case: "a key file of blank lines",
    args: ["--api-key-file", keyFile("blank.txt", "\n   \n\t\n")],
    env: {},
    names: /--api-key-file \S+blank\.txt holds no API key/,
  },
  {
    case: "LLAMA_ARG_API_KEY_FILE of comments",
    args: [],
    env: { LLAMA_ARG_API_KEY_FILE: keyFile("comments.txt", "# keys go here\n\n") },
    names: /LLAMA_ARG_API_KEY_FILE \S+comments\.txt holds no API key/,
  },
];

describe("an empty API key (finding 4)", () => {
  it.each(EMPTY_KEYS)("$case is refused by name when the options are read", ({ args, env, names }) => {
    const read = () => parseServeOptions(args, env);
    expect(read).toThrow(UsageError);
    expect(read).toThrow(names);
  });

  it.each(EMPTY_KEYS)(
    "bloomery-serve with $case exits at once, naming it, and never listens",
    async ({ args, env, names }) => {
      const server = spawnServe(["--port", "0", ...args], env);
      try {
        // With the defect the server loads and listens instead: the wait runs out and the test fails.
        const exit = await exitWithin(server, 20_000);
        expect(exit, `still running: ${server.stderr()}`).toBeDefined();
        expect(exit!.code).toBe(1);
        expect(server.stderr()).toMatch(names);
        expect(server.stderr()).not.toMatch(/listening on/);
      } finally {
        await server.kill();
      }
    },
    30_000,
  );

  it("createApp refuses a blank key however its caller got one", () => {
    expect(() => createApp({ modelPath: "m.gguf", apiKeys: ["k", " "], metrics: false, temperature: 0 })).toThrow(
      /an API key is empty/,
    );
  });

  it("reads real keys from the flag, the variable and a file of keys, blank lines and # comments", async () => {
    const path = keyFile("keys.txt", "# the team's keys\nk1\n\n  k2  \n");
    expect(parseServeOptions(["--api-key", "a, b", "--api-key-file", path]).apiKeys).toEqual(["a", "b", "k1", "k2"]);
    expect(parseServeOptions([], { LLAMA_API_KEY: "x" }).apiKeys).toEqual(["x"]);
    // The command line wins over the variable, even when the variable is empty.
    expect(parseServeOptions(["--api-key", "y"], { LLAMA_API_KEY: "" }).apiKeys).toEqual(["y"]);

    const { app, context } = createApp({ modelPath: "m.gguf", apiKeys: ["k1"], metrics: false, temperature: 0 });
    try {
      const without = await app.inject({ method: "POST", url: "/completion", payload: {} });
      expect(without.statusCode).toBe(401);
      const empty = await app.inject({
        method: "POST",
        url: "/completion",
        headers: { authorization: "Bearer " },
        payload: {},
      });
      expect(empty.statusCode).toBe(401);
      // The key is right: the request passes to the next check (the model is not loaded: 503).
      const keyed = await app.inject({
        method: "POST",
        url: "/completion",
        headers: { authorization: "Bearer k1" },
        payload: {},
      });
      expect(keyed.statusCode).toBe(503);
      expect(context.loaded).toBe(false);
    } finally {
      await app.close();
    }
  });
});
