// Each binding file adds its functions to the module's exports; addon.cc calls them all.
#pragma once

#include <napi.h>

#include <memory>

namespace bloomery::engine {
class Sampler;
class Session;
}  // namespace bloomery::engine
namespace bloomery::tokenizer {
class Tokenizer;
}  // namespace bloomery::tokenizer

namespace bloomery::addon {

void register_system_info(Napi::Env env, Napi::Object exports);
void register_gguf(Napi::Env env, Napi::Object exports);
void register_tokenizer(Napi::Env env, Napi::Object exports);
void register_model(Napi::Env env, Napi::Object exports);
void register_sampling(Napi::Env env, Napi::Object exports);
void register_state(Napi::Env env, Napi::Object exports);
void register_generation(Napi::Env env, Napi::Object exports);

// The live session behind the session handle info[index] (model.cc owns the handles); throws
// INVALID_ARGUMENT for anything else and DISPOSED for a disposed session.
std::shared_ptr<engine::Session> session_argument(const Napi::CallbackInfo& info, size_t index);

// A new session handle that owns `session`.
Napi::Value wrap_session(Napi::Env env, std::shared_ptr<engine::Session> session);

// The live sampler behind the sampler handle info[index] (sampling.cc owns the handles); throws
// INVALID_ARGUMENT for anything else and DISPOSED for a disposed sampler.
std::shared_ptr<engine::Sampler> sampler_argument(const Napi::CallbackInfo& info, size_t index);

// The tokenizer behind a NativeTokenizer object (tokenizer.cc owns them); throws
// INVALID_ARGUMENT for anything else, naming `what`.
std::shared_ptr<const tokenizer::Tokenizer> tokenizer_argument(const Napi::Value& value, const char* what);

}  // namespace bloomery::addon
