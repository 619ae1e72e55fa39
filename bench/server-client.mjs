// What the benchmarks that go through bloomery-serve share: starting it on a model and waiting until it
// serves, and a streamed /completion's token chunks with its last event's timings.
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { TextDecoder } from "node:util";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/**
 * Starts bloomery-serve (this checkout's dist/serve-cli.js) on `path` at `port` with `flags` and waits until its
 * model is loaded (/health answers 200); its log lines go to `log`. Rejects, with the log's last lines, when it exits.
 */
export async function startServer(path, port, flags, log) {
  const server = spawn(
    process.execPath,
    [join(root, "dist/serve-cli.js"), "-m", path, "--port", String(port), ...flags],
    {
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  server.stderr.on("data", (data) =>
    log.push(
      ...String(data)
        .split("\n")
        .filter((l) => l.trim()),
    ),
  );
  const exited = new Promise((_, reject) =>
    server.on("exit", (code) => reject(new Error(`bloomery-serve exited (${code}):\n${log.slice(-5).join("\n")}`))),
  );
  for (;;) {
    const health = await Promise.race([
      fetch(`http://127.0.0.1:${port}/health`).then(
        (r) => r.status,
        () => 0,
      ),
      exited,
    ]);
    if (health === 200) return server;
    await sleep(500);
  }
}

/**
 * The token chunks of a streamed /completion (`body`: its request, `stream` and `return_tokens` set here), and its
 * last event's timings in `out.timings`.
 */
export async function* completionChunks(port, body, out) {
  const response = await fetch(`http://127.0.0.1:${port}/completion`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...body, stream: true, return_tokens: true }),
  });
  if (!response.ok) throw new Error(`/completion: ${response.status} ${await response.text()}`);
  const decoder = new TextDecoder();
  let buffered = "";
  for await (const bytes of response.body) {
    buffered += decoder.decode(bytes, { stream: true });
    for (let end; (end = buffered.indexOf("\n\n")) >= 0; buffered = buffered.slice(end + 2)) {
      const event = buffered.slice(0, end);
      if (!event.startsWith("data: ")) continue;
      const data = JSON.parse(event.slice(6));
      if (data.stop) out.timings = data.timings;
      if (data.tokens?.length) yield { tokens: data.tokens };
    }
  }
}
