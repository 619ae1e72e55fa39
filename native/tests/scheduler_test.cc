// The scheduler thread's hold on requests: by the time a request's owner hears of its end,
// the thread has let go of it, so an owner that drops everything it holds and ends the process
// (a script's last line) does not leave the thread tearing the session or the runtime down
// while the process exits (it did: the GPU sequence's free ran as the CUDA runtime unloaded).
#include "engine/scheduler.h"

#include <chrono>
#include <future>
#include <memory>
#include <vector>

#include "engine/sampler.h"
#include "engine/session.h"
#include "model/model.h"
#include "tests/check.h"

using namespace bloomery;

namespace {

constexpr const char* kDefaultModel = "models/bloomery-tiny-moe-Q8_0.gguf";

std::shared_ptr<engine::Runtime> open_runtime() {
  engine::RuntimeOptions options;
  options.threads = 2;
  options.context_size = 256;
  return std::make_shared<engine::Runtime>(model::load_model(kDefaultModel), options);
}

// What the owner saw when it heard of the end: whether the session and the runtime were gone.
struct SeenAtEnd {
  bool session_gone = false;
  bool runtime_gone = false;
  engine::StopReason reason = engine::StopReason::kDone;
};

}  // namespace

TEST(scheduler_lets_go_of_a_request_before_its_owner_hears_of_its_end) {
  for (const bool generating : {false, true}) {
    std::shared_ptr<engine::Runtime> runtime = open_runtime();
    auto session = std::make_shared<engine::Session>(runtime);
    const std::weak_ptr<engine::Session> weak_session = session;
    const std::weak_ptr<engine::Runtime> weak_runtime = runtime;
    std::promise<SeenAtEnd> seen;
    engine::RequestEvents events;
    events.on_end = [&](engine::RequestEnd end) {
      seen.set_value({weak_session.expired(), weak_runtime.expired(), end.reason});
    };
    engine::Scheduler& scheduler = runtime->scheduler();
    // Long enough that the owner's references are gone well before the end.
    std::vector<int32_t> tokens(generating ? 8 : 200);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(10 + i * 37 % 3000);
    std::shared_ptr<engine::Request> request =
        generating ? scheduler.generate(session, tokens, std::make_shared<engine::Sampler>(engine::SamplerParams{}),
                                        {48}, std::move(events))
                   : scheduler.evaluate(session, tokens, engine::LogitRows::kLast, std::move(events));
    request.reset();
    session.reset();
    runtime.reset();
    std::future<SeenAtEnd> end = seen.get_future();
    CHECK(end.wait_for(std::chrono::seconds(60)) == std::future_status::ready) << "no end";
    const SeenAtEnd at_end = end.get();
    const char* what = generating ? "generation" : "evaluation";
    CHECK(at_end.reason != engine::StopReason::kCancelled) << what;
    CHECK(at_end.session_gone) << what << ": the session was still held when its owner heard of the end";
    CHECK(at_end.runtime_gone) << what << ": the runtime was still held when its owner heard of the end";
  }
}
