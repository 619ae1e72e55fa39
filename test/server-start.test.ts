import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";

// npm start: bloomery-serve on the bundled model, answering --ask questions through its own HTTP
// API before it goes on serving (here on a free port, stopped with SIGINT once it has answered).
describe("bloomery-serve --ask (npm start)", () => {
  it("serves the default model and prints its answers to the questions asked over HTTP", async () => {
    const child = spawn(process.execPath, ["dist/serve-cli.js", "--port", "0", "--ask", "What is a dog?"], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const answered = new Promise<void>((resolve, reject) => {
      child.stdout.on("data", (d: Buffer) => {
        stdout += d.toString();
        if (stdout.includes("\n\n")) resolve();
      });
      child.once("exit", (code) => reject(new Error(`exited with ${code}: ${stderr}`)));
    });
    try {
      await answered;
      expect(stdout).toMatch(/^> What is a dog\?\nA dog is /);
      expect(stderr).toMatch(/listening on http:\/\/127\.0\.0\.1:\d+/);
    } finally {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGINT");
      await exited;
    }
  }, 60_000);
});
