/**
 * bloomery-synth: writes a synthetic GGUF model of a preset.
 *
 *   bloomery-synth <preset> <out.gguf> [--type Q4_K] [--seed N] [--header-only]
 *   bloomery-synth --list
 * @module
 */
import { parseArgs } from "node:util";
import { BloomeryError } from "../../src/errors.js";
import { FILLABLE_TYPES } from "./blocks.js";
import { PRESETS } from "./presets.js";
import { DEFAULT_WEIGHT_TYPE, planSyntheticModel, writeSyntheticModel } from "./synth.js";

const USAGE = `usage: bloomery-synth <preset> <out.gguf> [--type TYPE] [--seed N] [--header-only]
       bloomery-synth --list

  --type TYPE     weight type of a tiny preset (default ${DEFAULT_WEIGHT_TYPE}): ${FILLABLE_TYPES.join(", ")}
  --seed N        seed of the random weights (default 1)
  --header-only   write the header and leave the tensor data a hole (a sparse file of full size)
  --list          list the presets with their sizes`;

const GB = 1e9;

function listPresets(): void {
  for (const preset of Object.values(PRESETS)) {
    const plan = planSyntheticModel({ preset: preset.name });
    const mix = preset.mix ? "fixed mix" : `--type, default ${DEFAULT_WEIGHT_TYPE}`;
    console.log(`${preset.name.padEnd(16)} ${preset.description}`);
    console.log(
      `${"".padEnd(16)} ${plan.tensors.length} tensors, ${plan.tensorBytes} bytes of tensor data, ` +
        `vocabulary ${plan.vocab.tokens.length} (${mix})`,
    );
  }
}

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      type: { type: "string" },
      seed: { type: "string" },
      "header-only": { type: "boolean" },
      list: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (values.list) {
    listPresets();
    return 0;
  }
  const [preset, out] = positionals;
  if (!preset || !out || positionals.length > 2) {
    console.error(USAGE);
    return 2;
  }
  const seed = values.seed === undefined ? undefined : Number(values.seed);
  if (seed !== undefined && !Number.isSafeInteger(seed)) {
    console.error(`--seed must be an integer, not ${values.seed}`);
    return 2;
  }
  const headerOnly = values["header-only"] ?? false;
  const started = performance.now();
  let lastReport = started;
  const plan = await writeSyntheticModel(out, {
    preset,
    weightType: values.type,
    seed,
    headerOnly,
    onProgress: (done, total) => {
      const now = performance.now();
      if (now - lastReport < 2000 || !process.stderr.isTTY) return;
      lastReport = now;
      const rate = done / GB / ((now - started) / 1000);
      process.stderr.write(`\r${(done / GB).toFixed(2)} / ${(total / GB).toFixed(2)} GB, ${rate.toFixed(2)} GB/s `);
    },
  });
  const seconds = (performance.now() - started) / 1000;
  if (process.stderr.isTTY) process.stderr.write("\r\x1b[K");
  const rate = headerOnly ? "" : `, ${(plan.tensorBytes / 1e6 / seconds).toFixed(0)} MB/s`;
  console.log(
    `${out}: ${plan.preset.name} (${plan.weightType}), ${plan.tensors.length} tensors, ` +
      `${plan.tensorBytes} bytes of tensor data${headerOnly ? " (header only)" : ""}, ${seconds.toFixed(1)} s${rate}`,
  );
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    if (error instanceof BloomeryError) console.error(`bloomery-synth: ${error.code}: ${error.message}`);
    else console.error(error);
    process.exit(1);
  },
);
