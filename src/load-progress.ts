/**
 * loadModel's progress: the engine's byte counts of each step that moves the weights, turned into
 * {@link LoadProgress} events whose `fraction` only grows.
 * @internal
 * @module
 */
import type { LoadProgress, LoadStep } from "./model.js";

/** The `fraction` reached once the metadata is read; the weights' steps share what is left up to 1. */
const METADATA_END = 0.02;
const WEIGHTS_END = 0.99;

export class LoadProgressReporter {
  readonly #listener: ((progress: LoadProgress) => void) | undefined;
  readonly #steps: readonly LoadStep[];
  #fraction = 0;
  #closed = false;
  #delivered!: () => void;
  /**
   * Settles once the engine's last report has come: they come through their own queue, which can trail the
   * load's promise, so loadModel waits for this before it reports `ready`.
   */
  readonly delivered = new Promise<void>((resolve) => (this.#delivered = resolve));
  /** The first error the listener threw: loadModel rejects with it. */
  error: unknown;

  /** `steps`: those the load will run, in order (see {@link LoadStep}). */
  constructor(listener: ((progress: LoadProgress) => void) | undefined, steps: readonly LoadStep[]) {
    this.#listener = listener;
    this.#steps = steps;
  }

  metadata(): void {
    this.#emit({ stage: "metadata", fraction: 0 });
  }

  /** The engine's report: `done` of `total` bytes of `step` (from the loading thread, in order), then `"done"`. */
  readonly weights = (step: LoadStep | "done", done: number, total: number): void => {
    if (step === "done") {
      this.#delivered();
      return;
    }
    const index = this.#steps.indexOf(step);
    if (index < 0) return;
    const within = total > 0 ? done / total : 1;
    const span = (WEIGHTS_END - METADATA_END) / this.#steps.length;
    this.#emit({
      stage: "weights",
      fraction: METADATA_END + span * (index + within),
      step,
      bytes: done,
      totalBytes: total,
    });
  };

  /** The last event. */
  ready(): void {
    this.#emit({ stage: "ready", fraction: 1 });
    this.#closed = true;
  }

  /** Ends the reports without a `ready` (a failed or aborted load): later ones are dropped. */
  close(): void {
    this.#closed = true;
  }

  #emit(progress: LoadProgress): void {
    if (this.#closed || !this.#listener) return;
    this.#fraction = Math.max(this.#fraction, progress.fraction);
    try {
      this.#listener({ ...progress, fraction: this.#fraction });
    } catch (error) {
      this.error ??= error;
      this.#closed = true;
    }
  }
}
