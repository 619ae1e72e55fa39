// The N-API module: the only place the engine meets Node.
#include <napi.h>

#include "addon/bindings.h"

namespace {

Napi::Object init(Napi::Env env, Napi::Object exports) {
  bloomery::addon::register_system_info(env, exports);
  bloomery::addon::register_gguf(env, exports);
  bloomery::addon::register_tokenizer(env, exports);
  bloomery::addon::register_model(env, exports);
  bloomery::addon::register_sampling(env, exports);
  bloomery::addon::register_state(env, exports);
  bloomery::addon::register_generation(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(bloomery, init)
