// The linux-arm64 addon, cross-compiled on an x64 machine (CPU only: the scalar kernels), and its
// native tests run under qemu-aarch64:
//   node tools/build/arm64.mjs          build build-arm64/build/Release/{bloomery.node,native_tests}
//   node tools/build/arm64.mjs --test   and run native_tests under qemu
//   node tools/build/arm64.mjs --generate  and generate text from the default model through the addon,
//                                          on Debian's arm64 Node.js under qemu
// Needs Debian's g++-aarch64-linux-gnu (and qemu-user for --test and --generate; for --generate also
// the arm64 architecture in dpkg: `dpkg --add-architecture arm64 && apt-get update`). The same
// binding.gyp builds it, in a folder of its own (build-arm64/, links to the sources), so the x64
// build in build/ stays as it is.
import { spawnSync } from "node:child_process";
import { copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, symlinkSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { nodeGyp } from "./node-gyp.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const arm64Root = join(root, "build-arm64");
export const arm64Addon = join(arm64Root, "build", "Release", "bloomery.node");
export const crossPrefix = "aarch64-linux-gnu-";
/** Where Debian's cross toolchain keeps the arm64 C and C++ runtime, for qemu's -L. */
export const arm64Sysroot = "/usr/aarch64-linux-gnu";

const say = (line) => console.log(`bloomery arm64: ${line}`);
const has = (cmd) => spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;

function run(cmd, args, options = {}) {
  const result = spawnSync(cmd, args, { stdio: "inherit", ...options });
  if (result.status !== 0) {
    say(`${cmd} ${args.join(" ")} failed (${result.error?.message ?? `exit ${result.status}`})`);
    process.exit(1);
  }
}

function build() {
  if (!has(`${crossPrefix}g++`)) {
    say(`${crossPrefix}g++ not found: install the cross compiler (Debian/Ubuntu: apt-get install g++-aarch64-linux-gnu)`);
    process.exit(1);
  }
  mkdirSync(arm64Root, { recursive: true });
  for (const entry of ["binding.gyp", "native", "tools", "node_modules", "package.json"]) {
    if (!existsSync(join(arm64Root, entry))) symlinkSync(join(root, entry), join(arm64Root, entry));
  }
  const ccache = (process.env.CXX ?? "").startsWith("ccache") ? "ccache " : "";
  const gyp = nodeGyp();
  const env = {
    ...gyp.env,
    BLOOMERY_CUDA: "0",
    CC: `${ccache}${crossPrefix}gcc`,
    CXX: `${ccache}${crossPrefix}g++`,
    LINK: `${crossPrefix}g++`,
    AR: `${crossPrefix}ar`,
  };
  const started = Date.now();
  say("cross-compiling the addon and native tests (CPU only)");
  run(gyp.command, [...gyp.args, "configure", "--arch=arm64", "--", "-Dbuild_tests=1"], { cwd: arm64Root, env });
  run(gyp.command, [...gyp.args, "build", "--jobs", "max"], { cwd: arm64Root, env });
  say(`built ${arm64Addon} in ${Math.round((Date.now() - started) / 1000)} s`);
}

function test() {
  if (!has("qemu-aarch64")) {
    say("qemu-aarch64 not found: install Debian's qemu-user");
    process.exit(1);
  }
  const started = Date.now();
  run("qemu-aarch64", ["-L", arm64Sysroot, join(arm64Root, "build", "Release", "native_tests")], { cwd: root });
  say(`native tests passed under qemu in ${Math.round((Date.now() - started) / 1000)} s`);
}

/** Debian's arm64 packages a Node.js needs, but for what the cross toolchain's sysroot already has. */
function nodePackages() {
  const inSysroot = new Set(["libc6", "libgcc-s1", "libstdc++6", "gcc-12-base"]);
  const depends = (pkg) =>
    spawnSync(
      "apt-cache",
      ["depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks"]
        .concat(["--no-replaces", "--no-enhances", "--no-pre-depends", pkg]),
      { encoding: "utf8" },
    ).stdout.split("\n");
  // nodejs and its closure of arm64 packages, then the arch-independent modules Debian's libnode
  // loads its externalized builtins from (/usr/share/nodejs: acorn, undici, ...), which apt lists
  // as the virtual <node-acorn:arm64>.
  const closure = depends("nodejs:arm64");
  const libraries = closure
    .filter((line) => /^[\w.+-]+:arm64$/.test(line))
    .filter((line) => !inSysroot.has(line.replace(/:arm64$/, "")));
  const builtins = closure.map((line) => /^\s+Depends: <(node-[\w.+-]+):arm64>$/.exec(line)?.[1]).filter(Boolean);
  return [...new Set([...libraries, ...builtins])];
}

/** Debian's arm64 Node.js in a sysroot of its own (the cross toolchain's, its packages over it). */
function nodeSysroot() {
  const sysroot = join(arm64Root, "node-sysroot");
  const node = join(sysroot, "usr", "bin", "node");
  if (existsSync(node)) return { sysroot, node };
  const arches = spawnSync("dpkg", ["--print-foreign-architectures"], { encoding: "utf8" }).stdout ?? "";
  if (!arches.split("\n").includes("arm64")) {
    say("Debian's arm64 packages are not known here: dpkg --add-architecture arm64 && apt-get update");
    process.exit(1);
  }
  const debs = join(arm64Root, "node-debs");
  rmSync(debs, { recursive: true, force: true });
  mkdirSync(debs, { recursive: true });
  const packages = nodePackages();
  say(`downloading Debian's arm64 Node.js: ${packages.join(" ")}`);
  run("apt-get", ["download", "-q", ...packages], { cwd: debs });
  const staging = join(arm64Root, "node-sysroot.partial");
  rmSync(staging, { recursive: true, force: true });
  cpSync(arm64Sysroot, staging, { recursive: true, verbatimSymlinks: true });
  for (const deb of readdirSync(debs).filter((f) => f.endsWith(".deb"))) run("dpkg", ["-x", join(debs, deb), staging]);
  rmSync(sysroot, { recursive: true, force: true });
  // Complete only once whole: a sysroot with its node is taken as ready.
  renameSync(staging, sysroot);
  return { sysroot, node };
}

/**
 * Generates a few tokens from the default model through the arm64 addon, on Debian's arm64 Node.js
 * under qemu: the package as a user gets it (dist/ and prebuilds/linux-arm64/), in a folder of its own.
 */
function generate() {
  const { sysroot, node } = nodeSysroot();
  const pkg = join(arm64Root, "package");
  rmSync(pkg, { recursive: true, force: true });
  mkdirSync(join(pkg, "prebuilds", "linux-arm64"), { recursive: true });
  copyFileSync(arm64Addon, join(pkg, "prebuilds", "linux-arm64", "node.napi.armv8.node"));
  // dist/ and package.json copied, not linked: Node resolves a link to its target, whose package
  // root (this checkout) holds the x64 build in build/Release.
  cpSync(join(root, "dist"), join(pkg, "dist"), { recursive: true });
  copyFileSync(join(root, "package.json"), join(pkg, "package.json"));
  for (const entry of ["node_modules", "models"]) symlinkSync(join(root, entry), join(pkg, entry));
  const script = [
    `import { loadModel } from ${JSON.stringify(join(pkg, "dist", "index.js"))};`,
    `const model = await loadModel(${JSON.stringify(join(pkg, "models", "bloomery-tiny-moe-Q8_0.gguf"))}, { threads: 2, contextSize: 256 });`,
    `const { text, tokens } = await model.createSession().generate("A river is", { maxTokens: 8 }).result;`,
    `console.log(JSON.stringify({ arch: process.arch, node: process.version, tokens: tokens.length, text }));`,
    `model.dispose();`,
  ].join("\n");
  // Debian's packages keep their libraries in multiarch folders, which the cross sysroot's loader does not search.
  const qemu = ["-L", sysroot, "-E", "LD_LIBRARY_PATH=/lib/aarch64-linux-gnu:/usr/lib/aarch64-linux-gnu", node];
  const version = spawnSync("qemu-aarch64", [...qemu, "--version"], { encoding: "utf8" }).stdout.trim();
  say(`generating through the addon on Debian's arm64 Node.js ${version} under qemu`);
  const started = Date.now();
  const child = spawnSync("qemu-aarch64", [...qemu, "--input-type=module", "-e", script], {
    encoding: "utf8",
    cwd: pkg,
  });
  process.stderr.write(child.stderr);
  const line = child.stdout.trim().split("\n").pop() ?? "";
  const result = child.status === 0 ? JSON.parse(line) : null;
  if (!result || result.arch !== "arm64" || result.tokens !== 8) {
    say(`the generation failed (${child.error?.message ?? `exit ${child.status}`}): ${child.stdout}`);
    process.exit(1);
  }
  say(`${result.tokens} tokens on ${result.arch} Node.js ${result.node} in ${Math.round((Date.now() - started) / 1000)} s: ${JSON.stringify(result.text)}`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  build();
  if (process.argv.includes("--test")) test();
  if (process.argv.includes("--generate")) generate();
}
