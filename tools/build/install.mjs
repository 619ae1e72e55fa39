// Makes the native addon ready on `npm install`:
//   node tools/build/install.mjs                      the package: use prebuilds/<platform>-<arch>/ when it loads
//                                                     here, else build from source (saying why)
//   node tools/build/install.mjs --force [--no-tests] build from source (npm run build:native)
// A source checkout (native/tests/ present) always builds, tests included: its prebuilds/ may be stale.
// Without a usable prebuild and without a toolchain it names what to install and fails.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readdirSync, rmSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { cudaArchs, findCudaHome } from "./cuda.mjs";
import { nodeGyp } from "./node-gyp.mjs";
import { prebuildPath } from "./prebuild-name.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const force = process.argv.includes("--force");
const tests = !process.argv.includes("--no-tests") && existsSync(join(root, "native", "tests"));
const checkout = existsSync(join(root, "native", "tests"));
const say = (line) => console.log(`bloomery: ${line}`);

/** Why the prebuild for this machine cannot be used, or null when it loads. */
export function prebuildProblem(file) {
  if (!existsSync(file)) return `no prebuilt addon for ${process.platform}-${process.arch} (${relative(root, file)})`;
  // A child process, so that a library the addon lacks (an older glibc, say) fails there and not here.
  const child = spawnSync(process.execPath, ["-e", "require(process.argv[1])", file], { encoding: "utf8" });
  if (child.status === 0) return null;
  const reason = (child.stderr || child.error?.message || `exit ${child.status}`).split("\n").find((l) => /error/i.test(l));
  return `the prebuilt addon ${relative(root, file)} does not load here (${(reason ?? child.stderr).trim()})`;
}

/** The tools node-gyp needs that are missing, each as a short name. */
function missingTools() {
  const has = (cmd) => spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
  const missing = [];
  const compiler = (process.env.CXX ?? "g++").trim().split(/\s+/).pop();
  if (!has(compiler)) missing.push(`a C++20 compiler (${compiler}, g++ 10 or newer)`);
  else {
    const major = Number(spawnSync(compiler, ["-dumpversion"], { encoding: "utf8" }).stdout?.split(".")[0]);
    if (/g\+\+/.test(compiler) && major < 10) missing.push(`g++ 10 or newer for C++20 (${compiler} is ${major})`);
  }
  if (!has("make")) missing.push("make");
  if (!has(process.env.npm_config_python || "python3")) missing.push("python3");
  return missing;
}

/** The build steps make will announce: one per source, and the links. */
function buildSteps(cuda) {
  const list = (...args) =>
    spawnSync(process.execPath, [join(root, "tools/build/sources.mjs"), ...args], { cwd: root, encoding: "utf8" })
      .stdout.split("\n")
      .filter(Boolean).length;
  const cu = cuda
    ? spawnSync(process.execPath, [join(root, "tools/build/cuda.mjs"), "sources"], { cwd: root, encoding: "utf8" })
        .stdout.split("\n")
        .filter(Boolean).length
    : 0;
  return list("engine", process.arch) + cu + list("addon") + (tests ? list("tests", process.arch) + 1 : 0) + 3;
}

/** Runs node-gyp, printing one line per step it starts (`[ 12/80] native/cpu/matmul.cc`). */
function build(cuda) {
  const gypRun = nodeGyp();
  const total = buildSteps(cuda);
  const started = Date.now();
  let step = 0;
  const log = [];
  const gyp = spawn(gypRun.command, [...gypRun.args, "rebuild", "--jobs", "max", "--", `-Dbuild_tests=${tests ? 1 : 0}`], {
    cwd: root,
    env: gypRun.env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines = (stream, each) => {
    let rest = "";
    stream.on("data", (chunk) => {
      const parts = (rest + chunk).split("\n");
      rest = parts.pop();
      parts.forEach(each);
    });
  };
  lines(gyp.stdout, (line) => {
    log.push(line);
    // make's step lines: "  CXX(target) Release/obj.target/<target>/native/x.o", "  nvcc native/cuda/x.cu", links.
    const step_ = /^\s+(CXX\(target\)|CC\(target\)|nvcc|AR\(target\)|SOLINK_MODULE\(target\)|LINK\(target\))\s+(\S+)/.exec(line);
    if (!step_) return;
    step = Math.min(step + 1, total);
    const what = step_[1] === "nvcc" ? `${step_[2]} (CUDA)` : step_[2].replace(/^Release\/obj\.target\/[^/]+\//, "");
    const seconds = Math.round((Date.now() - started) / 1000);
    say(`[${String(step).padStart(String(total).length)}/${total}] ${what.replace(/\.o$/, ".cc")} (${seconds} s)`);
  });
  lines(gyp.stderr, (line) => {
    log.push(line);
    if (!line.startsWith("gyp info")) console.error(line);
  });
  return new Promise((resolve) => {
    gyp.on("error", (error) => {
      say(`could not run node-gyp: ${error.message}`);
      resolve(1);
    });
    gyp.on("close", (code) => {
      if (code !== 0) console.error(log.slice(-40).join("\n"));
      else say(`built build/Release/bloomery.node in ${Math.round((Date.now() - started) / 1000)} s`);
      resolve(code ?? 1);
    });
  });
}

/** A package install keeps the addon only: objects, archives and makefiles are hundreds of MB of leftovers. */
function dropLeftovers() {
  const release = join(root, "build", "Release");
  for (const entry of readdirSync(join(root, "build"))) {
    if (entry !== "Release") rmSync(join(root, "build", entry), { recursive: true, force: true });
  }
  for (const entry of readdirSync(release)) {
    if (entry !== "bloomery.node") rmSync(join(release, entry), { recursive: true, force: true });
  }
}

async function main() {
  let why = "building from source (npm run build:native)";
  if (!force && !checkout) {
    const problem = prebuildProblem(prebuildPath(root, process.platform, process.arch));
    if (!problem) {
      say(`using the prebuilt addon ${relative(root, prebuildPath(root, process.platform, process.arch))}`);
      return 0;
    }
    why = `${problem}: building it from source`;
  } else if (!force) why = "a source checkout: building the addon and its native tests";
  say(why);
  const missing = missingTools();
  if (missing.length > 0) {
    say(`cannot build: this machine lacks ${missing.join(", ")}.`);
    say(
      "install them and run npm install again (Debian/Ubuntu: sudo apt-get install build-essential python3; " +
        "Fedora/RHEL: sudo dnf install gcc-c++ make python3).",
    );
    return 1;
  }
  const cuda = findCudaHome();
  if (cuda) say(`with CUDA from ${cuda} for sm_${cudaArchs().join(", sm_")} (+PTX): nvcc takes minutes per file`);
  else if (process.env.BLOOMERY_CUDA === "0") say("CPU-only (BLOOMERY_CUDA=0)");
  else say("nvcc not found (CUDA_PATH, /usr/local/cuda, PATH): CPU-only, GPUs will be unavailable");
  const code = await build(cuda);
  if (code === 0 && !checkout) dropLeftovers();
  return code;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.exitCode = await main();
