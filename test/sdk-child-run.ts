// Runs a scenario of sdk-child.ts in a child process with a time limit, and reports how it ended.
import { spawn } from "node:child_process";

export interface ScenarioEnd {
  /** The scenario's JSON line; undefined when it printed none. */
  result: ({ outcome: string } & Record<string, unknown>) | undefined;
  /** The signal that ended the child (SIGKILL after the time limit). */
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  stderr: string;
}

export function runScenario(scenario: string, args: string[], timeoutMs = 20_000): Promise<ScenarioEnd> {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ["--import", "./test/child-loader.mjs", "test/sdk-child.ts", scenario, ...args],
      {
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let stdout = "";
    let stderr = "";
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, timeoutMs);
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    child.on("exit", (_code, signal) => {
      clearTimeout(timer);
      const line = stdout.trim().split("\n").pop();
      resolve({ result: line ? JSON.parse(line) : undefined, signal, timedOut, stderr });
    });
  });
}
