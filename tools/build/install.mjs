// Builds the native addon on `npm install` unless a matching prebuild already loads.
//   node tools/build/install.mjs          use prebuilds/ when one loads, else build
//   node tools/build/install.mjs --force  always build (npm run build:native)
// Says whether the build has CUDA, and why not when it has none.
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { cudaArchs, findCudaHome } from "./cuda.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const force = process.argv.includes("--force");

if (!force) {
  try {
    const require = createRequire(import.meta.url);
    const prebuild = require("node-gyp-build").path(root);
    if (prebuild.includes(`${join(root, "prebuilds")}`)) {
      console.log(`bloomery: using prebuild ${prebuild}`);
      process.exit(0);
    }
  } catch {
    // no prebuild for this platform: build from source below
  }
}

const cuda = findCudaHome();
if (cuda) console.log(`bloomery: building with CUDA from ${cuda} for sm_${cudaArchs().join(", sm_")} (+PTX)`);
else
  console.log(
    process.env.BLOOMERY_CUDA === "0"
      ? "bloomery: building CPU-only (BLOOMERY_CUDA=0)"
      : "bloomery: nvcc not found (CUDA_PATH, /usr/local/cuda, PATH): building CPU-only; GPUs will be unavailable",
  );

const nodeGyp = process.env.npm_config_node_gyp;
const [cmd, args] = nodeGyp ? [process.execPath, [nodeGyp]] : ["node-gyp", []];
const result = spawnSync(cmd, [...args, "rebuild", "--jobs", "max"], { cwd: root, stdio: "inherit" });
if (result.error) {
  console.error(`bloomery: could not run node-gyp: ${result.error.message}`);
  process.exit(1);
}
process.exit(result.status ?? 1);
