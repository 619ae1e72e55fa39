// Each binding file adds its functions to the module's exports; addon.cc calls them all.
#pragma once

#include <napi.h>

namespace bloomery::addon {

void register_system_info(Napi::Env env, Napi::Object exports);
void register_gguf(Napi::Env env, Napi::Object exports);
void register_tokenizer(Napi::Env env, Napi::Object exports);
void register_model(Napi::Env env, Napi::Object exports);

}  // namespace bloomery::addon
