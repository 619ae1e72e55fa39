// Hands work from the engine's threads to the JS thread: each post() runs its function there,
// in the order posted, with the JS function the channel was made for. It keeps Node's event
// loop alive until close(), which comes after the last post (the scheduler's on_end). Posts
// after Node began to shut down are dropped.
#pragma once

#include <napi.h>

#include <functional>
#include <utility>

namespace bloomery::addon {

class JsThread {
 public:
  // `target` is what post()'s functions receive; left out, a function that does nothing.
  JsThread(Napi::Env env, const char* name, Napi::Function target = Napi::Function())
      : function_(Napi::ThreadSafeFunction::New(
            env, target.IsEmpty() ? Napi::Function::New(env, [](const Napi::CallbackInfo&) {}) : target, name, 0, 1)) {}

  void post(std::function<void(Napi::Env, Napi::Function)> work) {
    function_.NonBlockingCall([work = std::move(work)](Napi::Env env, Napi::Function target) {
      try {
        work(env, target);
      } catch (const Napi::Error& e) {
        e.ThrowAsJavaScriptException();  // reported as an uncaught exception
      }
    });
  }

  void close() { function_.Release(); }

 private:
  Napi::ThreadSafeFunction function_;
};

}  // namespace bloomery::addon
