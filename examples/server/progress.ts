// A progress line for long work (loading the model, downloading it): on a terminal a bar redrawn in
// place; elsewhere (a log file, a pipe, a service manager) a plain line at each tenth, so logs stay short.

/** Where the line is written: process.stderr, or anything shaped like it. */
export interface ProgressStream {
  isTTY?: boolean;
  columns?: number;
  write(text: string): unknown;
}

const BAR = 24;
/** The shortest time between two redraws of the bar. */
const REDRAW_MS = 100;

export class ProgressLine {
  readonly #out: ProgressStream;
  readonly #label: string;
  #tenths = -1;
  #drawn = 0;
  #open = false;

  /** `label` starts every line, e.g. `bloomery-serve: loading model.gguf`. */
  constructor(out: ProgressStream, label: string) {
    this.#out = out;
    this.#label = label;
  }

  /** Shows `fraction` (0 to 1) of the work done, with `detail` (e.g. `12.0 of 24.0 MB`) after it. */
  update(fraction: number, detail = ""): void {
    const f = Math.min(1, Math.max(0, fraction));
    const percent = `${Math.floor(f * 100)}%`.padStart(4);
    if (this.#out.isTTY) {
      const now = Date.now();
      if (f < 1 && now - this.#drawn < REDRAW_MS) return;
      this.#drawn = now;
      const filled = Math.round(f * BAR);
      const line = `${this.#label} [${"#".repeat(filled)}${".".repeat(BAR - filled)}] ${percent} ${detail}`;
      const width = this.#out.columns ?? 80;
      this.#out.write(`\r${line.slice(0, width - 1).padEnd(width - 1)}`);
      this.#open = true;
      return;
    }
    const tenths = Math.floor(f * 10);
    if (tenths <= this.#tenths) return;
    this.#tenths = tenths;
    this.#out.write(`${this.#label} ${percent.trim()} ${detail}`.trimEnd() + "\n");
  }

  /** Ends the bar's line on a terminal (the next output starts on a line of its own). */
  end(): void {
    if (this.#open) this.#out.write("\n");
    this.#open = false;
  }
}

/** Bytes as MB with one decimal, e.g. `24.7 MB`. */
export function megabytes(bytes: number): string {
  return `${(bytes / 1e6).toFixed(1)} MB`;
}
