// GPU machine: getSystemInfo() must see the card. Skips only where no NVIDIA device exists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { getSystemInfo } from "../../dist/index.js";

const hasGpu = existsSync("/dev/nvidiactl");

test("getSystemInfo reports each GPU", { skip: !hasGpu && "no NVIDIA device on this machine" }, () => {
  const info = getSystemInfo();
  assert.equal(info.cuda.compiled, true, "addon built without CUDA");
  assert.equal(info.cuda.available, true, `CUDA unavailable: ${info.cuda.reason}`);
  assert.ok(info.cuda.driverVersion >= info.cuda.runtimeVersion, "driver older than the runtime");
  assert.ok(info.gpus.length >= 1);
  for (const g of info.gpus) {
    assert.match(g.computeCapability, /^\d+\.\d+$/);
    assert.ok(g.totalMemory > 1024 ** 3, `${g.name}: total memory ${g.totalMemory}`);
    assert.ok(g.freeMemory > 0 && g.freeMemory <= g.totalMemory, `${g.name}: free memory ${g.freeMemory}`);
    assert.ok(g.multiprocessors > 0);
  }
  console.log(JSON.stringify(info, null, 2));
});
