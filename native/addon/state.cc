// The session-state bindings: save / restore (in memory or through a file), fork, and storing
// a session's state in the prompt-state cache (a generation's prompt restores from it:
// Scheduler::generate). The work that copies keys and values runs on a worker thread, under
// the runtime's compute lock, so it never overlaps a pass of the scheduler thread.
#include "engine/state.h"

#include <cstring>
#include <memory>
#include <string>

#include "addon/async.h"
#include "addon/bindings.h"
#include "addon/errors.h"
#include "engine/session.h"

namespace bloomery::addon {

namespace {

constexpr napi_type_tag kStateTag{0x6c6f6f6d73746174, 0x0000000000000004};

// Tells the garbage collector how much memory the state holds, so unused states go soon.
struct StateHandle {
  StateHandle(Napi::Env env, std::shared_ptr<const engine::SessionState> s) : state(std::move(s)) {
    Napi::MemoryManagement::AdjustExternalMemory(env, static_cast<int64_t>(state->bytes()));
  }
  std::shared_ptr<const engine::SessionState> state;
};

Napi::Value wrap_state(Napi::Env env, std::shared_ptr<const engine::SessionState> state) {
  auto external =
      Napi::External<StateHandle>::New(env, new StateHandle(env, std::move(state)), [](Napi::Env env, StateHandle* h) {
        Napi::MemoryManagement::AdjustExternalMemory(env, -static_cast<int64_t>(h->state->bytes()));
        delete h;
      });
  external.TypeTag(&kStateTag);
  return external;
}

const engine::SessionState& state_argument(const Napi::CallbackInfo& info, size_t index) {
  if (info.Length() <= index || !info[index].IsExternal() ||
      !info[index].As<Napi::External<StateHandle>>().CheckTypeTag(&kStateTag)) {
    throw to_js_error(info.Env(), "INVALID_ARGUMENT", "expected a session state");
  }
  return *info[index].As<Napi::External<StateHandle>>().Data()->state;
}

std::string path_argument(const Napi::CallbackInfo& info, size_t index) {
  if (info.Length() <= index || !info[index].IsString() || info[index].As<Napi::String>().Utf8Value().empty()) {
    throw to_js_error(info.Env(), "INVALID_ARGUMENT", "the path must be a non-empty string");
  }
  return info[index].As<Napi::String>().Utf8Value();
}

Napi::Value resolved_undefined(Napi::Env env, bool) { return env.Undefined(); }

// sessionSave(session) -> Promise<state>
Napi::Value session_save(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    return run_async(
        info.Env(), [session = session_argument(info, 0)] { return session->save(); },
        [](Napi::Env env, const std::shared_ptr<const engine::SessionState>& state) { return wrap_state(env, state); });
  });
}

// sessionSaveFile(session, path) -> Promise<undefined>
Napi::Value session_save_file(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    return run_async(
        info.Env(),
        [session = session_argument(info, 0), path = path_argument(info, 1)] {
          session->save(path);
          return true;
        },
        resolved_undefined);
  });
}

// sessionRestore(session, state) -> Promise<undefined>
Napi::Value session_restore(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    std::shared_ptr<engine::Session> session = session_argument(info, 0);
    state_argument(info, 1);
    return run_async(
        info.Env(),
        [session = std::move(session), state = info[1].As<Napi::External<StateHandle>>().Data()->state] {
          session->restore(*state);
          return true;
        },
        resolved_undefined);
  });
}

// sessionRestoreFile(session, path) -> Promise<undefined>
Napi::Value session_restore_file(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    return run_async(
        info.Env(),
        [session = session_argument(info, 0), path = path_argument(info, 1)] {
          session->restore(path);
          return true;
        },
        resolved_undefined);
  });
}

// sessionFork(session) -> Promise<session handle>
Napi::Value session_fork(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    return run_async(
        info.Env(), [session = session_argument(info, 0)] { return session->fork(); },
        [](Napi::Env env, std::shared_ptr<engine::Session>& fork) { return wrap_session(env, std::move(fork)); });
  });
}

// stateTokens(state) -> Int32Array: the tokens the state holds, in order.
Napi::Value state_tokens(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    const engine::SessionState& state = state_argument(info, 0);
    Napi::Int32Array out = Napi::Int32Array::New(info.Env(), state.tokens.size());
    std::memcpy(out.Data(), state.tokens.data(), state.tokens.size() * sizeof(int32_t));
    return out;
  });
}

// stateBytes(state) -> number: host memory the state holds.
Napi::Value state_bytes(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    return Napi::Number::New(info.Env(), static_cast<double>(state_argument(info, 0).bytes()));
  });
}

// sessionStoreInCache(session) -> Promise<boolean>: see Session::store_in_cache.
Napi::Value session_store_in_cache(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    return run_async(
        info.Env(), [session = session_argument(info, 0)] { return session->store_in_cache(); },
        [](Napi::Env env, bool stored) { return Napi::Boolean::New(env, stored); });
  });
}

}  // namespace

void register_state(Napi::Env env, Napi::Object exports) {
  exports.Set("sessionSave", Napi::Function::New(env, session_save, "sessionSave"));
  exports.Set("sessionSaveFile", Napi::Function::New(env, session_save_file, "sessionSaveFile"));
  exports.Set("sessionRestore", Napi::Function::New(env, session_restore, "sessionRestore"));
  exports.Set("sessionRestoreFile", Napi::Function::New(env, session_restore_file, "sessionRestoreFile"));
  exports.Set("sessionFork", Napi::Function::New(env, session_fork, "sessionFork"));
  exports.Set("stateTokens", Napi::Function::New(env, state_tokens, "stateTokens"));
  exports.Set("stateBytes", Napi::Function::New(env, state_bytes, "stateBytes"));
  exports.Set("sessionStoreInCache", Napi::Function::New(env, session_store_in_cache, "sessionStoreInCache"));
}

}  // namespace bloomery::addon
