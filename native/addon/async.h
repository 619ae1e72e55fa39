// One way to run engine work off the JS thread: `compute` runs on a worker thread, then
// `convert` turns its result into the JS value the promise resolves to. Engine errors reject
// the promise with their code (a plain AsyncWorker::SetError would keep only the message).
#pragma once

#include <napi.h>

#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "addon/errors.h"

namespace bloomery::addon {

template <typename Compute, typename Convert>
Napi::Promise run_async(Napi::Env env, Compute compute, Convert convert) {
  using Result = std::invoke_result_t<Compute&>;

  class Worker : public Napi::AsyncWorker {
   public:
    Worker(Napi::Env env, Compute compute, Convert convert)
        : Napi::AsyncWorker(env),
          compute_(std::move(compute)),
          convert_(std::move(convert)),
          deferred_(Napi::Promise::Deferred::New(env)) {}

    Napi::Promise promise() const { return deferred_.Promise(); }

    void Execute() override {
      try {
        result_.emplace(compute_());
      } catch (...) {
        error_ = std::current_exception();
      }
    }

    void OnOK() override {
      Napi::Env env = Env();
      if (error_) {
        deferred_.Reject(to_js_error(env, error_).Value());
        return;
      }
      try {
        deferred_.Resolve(convert_(env, *result_));
      } catch (const Napi::Error& e) {
        deferred_.Reject(e.Value());
      } catch (...) {
        deferred_.Reject(to_js_error(env, std::current_exception()).Value());
      }
    }

   private:
    Compute compute_;
    Convert convert_;
    Napi::Promise::Deferred deferred_;
    std::optional<Result> result_;
    std::exception_ptr error_;
  };

  auto* worker = new Worker(env, std::move(compute), std::move(convert));
  Napi::Promise promise = worker->promise();
  worker->Queue();  // the worker deletes itself once settled
  return promise;
}

}  // namespace bloomery::addon
