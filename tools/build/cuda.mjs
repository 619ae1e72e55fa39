// Answers binding.gyp's questions about CUDA, so the build decides in one place:
//   node tools/build/cuda.mjs home     -> the CUDA toolkit root, or nothing for a CPU-only build
//   node tools/build/cuda.mjs device-flags -> nvcc's -gencode flags and fatbin compression, one per line
//   node tools/build/cuda.mjs sources  -> the .cu files under native/, one per line
//   node tools/build/cuda.mjs headers  -> the headers they include (transitively), one per line
// BLOOMERY_CUDA=0 forces a CPU-only build; BLOOMERY_CUDA_ARCHS="90" (or "80;90") narrows the
// architectures; CUDA_PATH names a toolkit elsewhere than /usr/local/cuda.
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join, dirname, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { execFileSync } from "node:child_process";

export const DEFAULT_ARCHS = ["80", "86", "89", "90", "120"];

export function findCudaHome(env = process.env) {
  if (env.BLOOMERY_CUDA === "0") return "";
  const candidates = [env.CUDA_PATH, env.CUDA_HOME, "/usr/local/cuda"].filter(Boolean);
  try {
    const nvcc = execFileSync("sh", ["-c", "command -v nvcc"], { encoding: "utf8" }).trim();
    if (nvcc) candidates.push(dirname(dirname(nvcc)));
  } catch {
    // no nvcc on PATH: the fixed candidates decide
  }
  for (const home of candidates) {
    if (existsSync(join(home, "bin", "nvcc")) && existsSync(join(home, "lib64", "libcudart_static.a")))
      return home;
  }
  return "";
}

export function cudaArchs(env = process.env) {
  const raw = env.BLOOMERY_CUDA_ARCHS?.trim();
  const archs = raw ? raw.split(/[;, ]+/).filter(Boolean) : DEFAULT_ARCHS;
  for (const a of archs) if (!/^\d{2,3}[af]?$/.test(a)) throw new Error(`BLOOMERY_CUDA_ARCHS: bad architecture "${a}"`);
  return archs;
}

/** The toolkit's release as [major, minor], from `nvcc --version` ("release 13.0"). */
export function nvccRelease(home) {
  const text = execFileSync(join(home, "bin", "nvcc"), ["--version"], { encoding: "utf8" });
  const match = /release (\d+)\.(\d+)/.exec(text);
  if (!match) throw new Error(`${home}/bin/nvcc --version names no release:\n${text}`);
  return [Number(match[1]), Number(match[2])];
}

export function deviceFlags(archs, [major, minor]) {
  const flags = archs.map((a) => `-gencode=arch=compute_${a},code=sm_${a}`);
  // PTX of the newest architecture lets future GPUs JIT-compile the kernels.
  const newest = archs[archs.length - 1];
  flags.push(`-gencode=arch=compute_${newest},code=compute_${newest}`);
  // The fatbins are most of the addon: compressed for size they take about a fifth of the default's bytes
  // (measured on moe.cu for three targets: 756 KB to 167 KB), and the driver unpacks them once at load.
  // Toolkits before 12.8 lack --compress-mode; their fatbinary compresses with -compress-all.
  flags.push(major > 12 || (major === 12 && minor >= 8) ? "--compress-mode=size" : "-Xfatbin=-compress-all");
  return flags;
}

function cudaSources(root) {
  const out = [];
  const walk = (dir) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith(".cu")) out.push(relative(root, p));
    }
  };
  walk(join(root, "native"));
  return out.sort();
}

/**
 * The project headers the .cu files include, directly or through each other (`#include "..."`
 * resolved under native/): every nvcc rule depends on them all, since gyp's rules track no header
 * dependencies of their own and an edited .cuh would otherwise leave stale objects.
 */
export function cudaHeaders(root) {
  const seen = new Set();
  const pending = cudaSources(root);
  while (pending.length > 0) {
    const file = pending.pop();
    for (const [, include] of readFileSync(join(root, file), "utf8").matchAll(/^#include "([^"]+)"/gm)) {
      const header = join("native", include);
      if (seen.has(header) || !existsSync(join(root, header))) continue;
      seen.add(header);
      pending.push(header);
    }
  }
  return [...seen].sort();
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
  const what = process.argv[2];
  if (what === "home") console.log(findCudaHome());
  else if (what === "device-flags") {
    const home = findCudaHome();
    console.log(home ? deviceFlags(cudaArchs(), nvccRelease(home)).join("\n") : "");
  }
  else if (what === "sources") console.log(findCudaHome() ? cudaSources(root).join("\n") : "");
  else if (what === "headers") console.log(findCudaHome() ? cudaHeaders(root).join("\n") : "");
  else {
    console.error("usage: cuda.mjs home|device-flags|sources|headers");
    process.exit(2);
  }
}
