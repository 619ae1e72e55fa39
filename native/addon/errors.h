// Turns engine errors into JS errors that carry the engine's code, so src/errors.ts can
// rethrow them as BloomeryError. Every binding entry point goes through guarded().
#pragma once

#include <napi.h>

#include <exception>
#include <new>

#include "base/error.h"

namespace bloomery::addon {

inline Napi::Error to_js_error(Napi::Env env, const std::string& code, const std::string& message) {
  Napi::Error e = Napi::Error::New(env, message);
  e.Set("code", Napi::String::New(env, code));
  return e;
}

inline Napi::Error to_js_error(Napi::Env env, std::exception_ptr ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const Error& e) {
    return to_js_error(env, e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return to_js_error(env, "OUT_OF_MEMORY", "the native engine could not allocate memory");
  } catch (const std::exception& e) {
    return to_js_error(env, "INTERNAL", e.what());
  }
}

// Runs a binding body; engine exceptions become JS exceptions with their code.
template <typename Fn>
Napi::Value guarded(const Napi::CallbackInfo& info, Fn&& body) {
  try {
    return body();
  } catch (const Napi::Error&) {
    throw;
  } catch (...) {
    throw to_js_error(info.Env(), std::current_exception());
  }
}

}  // namespace bloomery::addon
