// The linux-arm64 addon, cross-compiled on an x64 machine (CPU only: the scalar kernels), and its
// native tests run under qemu-aarch64:
//   node tools/build/arm64.mjs          build build-arm64/build/Release/{bloomery.node,native_tests}
//   node tools/build/arm64.mjs --test   and run native_tests under qemu
// Needs Debian's g++-aarch64-linux-gnu (and qemu-user for --test). The same binding.gyp builds it, in a
// folder of its own (build-arm64/, links to the sources), so the x64 build in build/ stays as it is.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, symlinkSync } from "node:fs";
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

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  build();
  if (process.argv.includes("--test")) test();
}
