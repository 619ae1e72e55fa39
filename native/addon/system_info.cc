// getSystemInfo(), hostMemory() and ggmlTypes(): what the host, its GPUs and the quant table look like.
#include "addon/bindings.h"
#include "addon/errors.h"
#include "cpu/cpu_dispatch.h"
#include "cpu/host_info.h"
#include "cuda/device.h"
#include "quant/ggml_types.h"

namespace bloomery::addon {

namespace {

Napi::Value get_system_info(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Napi::Env env = info.Env();
    const cpu::HostInfo host = cpu::detect_host();
    Napi::Object cpu_obj = Napi::Object::New(env);
    cpu_obj.Set("model", host.cpu_model);
    cpu_obj.Set("logicalCores", host.logical_cores);
    cpu_obj.Set("physicalCores", host.physical_cores);
    Napi::Object f = Napi::Object::New(env);
    const cpu::CpuFeatures& cf = host.features;
    f.Set("avx", cf.avx);
    f.Set("avx2", cf.avx2);
    f.Set("fma", cf.fma);
    f.Set("f16c", cf.f16c);
    f.Set("avxVnni", cf.avx_vnni);
    f.Set("bmi2", cf.bmi2);
    f.Set("avx512f", cf.avx512f);
    f.Set("avx512bw", cf.avx512bw);
    f.Set("avx512vl", cf.avx512vl);
    f.Set("avx512vnni", cf.avx512vnni);
    f.Set("avx512bf16", cf.avx512bf16);
    f.Set("avx512fp16", cf.avx512fp16);
    f.Set("amxTile", cf.amx_tile);
    f.Set("amxInt8", cf.amx_int8);
    f.Set("amxBf16", cf.amx_bf16);
    cpu_obj.Set("features", f);
    cpu_obj.Set("simdTier", std::string(quant::simd_tier_name(cpu::host_simd_tier())));

    Napi::Object mem = Napi::Object::New(env);
    mem.Set("total", double(host.total_ram));
    mem.Set("available", double(host.available_ram));

    const cuda::CudaStatus cs = cuda::query_cuda();
    Napi::Object cuda_obj = Napi::Object::New(env);
    cuda_obj.Set("compiled", cuda::compiled_with_cuda());
    cuda_obj.Set("available", cs.available);
    if (!cs.available) cuda_obj.Set("reason", cs.reason);
    cuda_obj.Set("driverVersion", cs.driver_version);
    cuda_obj.Set("runtimeVersion", cs.runtime_version);
    Napi::Array gpus = Napi::Array::New(env, cs.devices.size());
    for (size_t i = 0; i < cs.devices.size(); ++i) {
      const cuda::DeviceInfo& d = cs.devices[i];
      Napi::Object g = Napi::Object::New(env);
      g.Set("index", d.index);
      g.Set("name", d.name);
      g.Set("computeCapability", std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor));
      g.Set("totalMemory", double(d.total_memory));
      g.Set("freeMemory", double(d.free_memory));
      g.Set("multiprocessors", d.multiprocessors);
      g.Set("pciBusId", d.pci_bus_id);
      gpus.Set(uint32_t(i), g);
    }

    Napi::Object out = Napi::Object::New(env);
    out.Set("cpu", cpu_obj);
    out.Set("memory", mem);
    out.Set("cuda", cuda_obj);
    out.Set("gpus", gpus);
    return out;
  });
}

// hostMemory() -> { total, available }: getSystemInfo's memory without querying the GPUs (a CPU load's
// default hostRam must not create a CUDA context).
Napi::Value host_memory(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    const cpu::HostInfo host = cpu::detect_host();
    Napi::Object mem = Napi::Object::New(info.Env());
    mem.Set("total", double(host.total_ram));
    mem.Set("available", double(host.available_ram));
    return mem;
  });
}

Napi::Value ggml_types(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    Napi::Env env = info.Env();
    auto types = quant::ggml_types();
    Napi::Array out = Napi::Array::New(env, types.size());
    for (size_t i = 0; i < types.size(); ++i) {
      Napi::Object t = Napi::Object::New(env);
      t.Set("id", types[i].id);
      t.Set("name", std::string(types[i].name));
      t.Set("blockElements", types[i].block_elements);
      t.Set("blockBytes", types[i].block_bytes);
      out.Set(uint32_t(i), t);
    }
    return out;
  });
}

}  // namespace

void register_system_info(Napi::Env env, Napi::Object exports) {
  exports.Set("getSystemInfo", Napi::Function::New(env, get_system_info, "getSystemInfo"));
  exports.Set("hostMemory", Napi::Function::New(env, host_memory, "hostMemory"));
  exports.Set("ggmlTypes", Napi::Function::New(env, ggml_types, "ggmlTypes"));
}

}  // namespace bloomery::addon
