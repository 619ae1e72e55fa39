// The tokenizer binding: NativeTokenizer(path) with tokenize / detokenize / info, and
// NativeStreamDecoder(tokenizer, special) for streamed detokenization.
#include "tokenizer/tokenizer.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "addon/async.h"
#include "addon/bindings.h"
#include "addon/errors.h"
#include "base/low_priority.h"

namespace bloomery::addon {

namespace {

using tokenizer::StreamDecoder;
using tokenizer::Tokenizer;

Napi::Error invalid(Napi::Env env, const std::string& message) { return to_js_error(env, "INVALID_ARGUMENT", message); }

bool flag(const Napi::CallbackInfo& info, size_t i) { return info.Length() > i && info[i].ToBoolean().Value(); }

std::vector<uint32_t> token_ids(const Napi::CallbackInfo& info, size_t i) {
  if (info.Length() <= i || !info[i].IsTypedArray() ||
      info[i].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
    throw invalid(info.Env(), "tokens must be a Uint32Array");
  }
  const Napi::Uint32Array a = info[i].As<Napi::Uint32Array>();
  return std::vector<uint32_t>(a.Data(), a.Data() + a.ElementLength());
}

Napi::Uint32Array to_js(Napi::Env env, const std::vector<uint32_t>& ids) {
  Napi::Uint32Array a = Napi::Uint32Array::New(env, ids.size());
  std::copy(ids.begin(), ids.end(), a.Data());
  return a;
}

// The ids as a Uint32Array over their own memory, moved out of `ids`: a long text's ids are
// megabytes that a copy would write on the JS thread.
Napi::Uint32Array to_js_moved(Napi::Env env, std::vector<uint32_t>& ids) {
  if (ids.empty()) return Napi::Uint32Array::New(env, 0);
  auto owned = std::make_unique<std::vector<uint32_t>>(std::move(ids));
  Napi::ArrayBuffer memory = Napi::ArrayBuffer::New(
      env, owned->data(), owned->size() * sizeof(uint32_t),
      [](Napi::Env, void*, std::vector<uint32_t>* held) { delete held; }, owned.get());
  const size_t count = owned.release()->size();
  return Napi::Uint32Array::New(env, count, memory, 0);
}

Napi::String utf8(Napi::Env env, const std::string& bytes) {
  return Napi::String::New(env, bytes.data(), bytes.size());
}

// Marks NativeTokenizer objects, so a decoder can check what it is given before unwrapping it.
constexpr napi_type_tag kTokenizerTag = {0x5b1c0e3a9d274f61ull, 0xa4e8c2f07b3d9156ull};

class TokenizerWrap : public Napi::ObjectWrap<TokenizerWrap> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "NativeTokenizer",
                       {
                           InstanceMethod<&TokenizerWrap::tokenize>("tokenize"),
                           InstanceMethod<&TokenizerWrap::tokenize_async>("tokenizeAsync"),
                           InstanceMethod<&TokenizerWrap::detokenize>("detokenize"),
                           InstanceMethod<&TokenizerWrap::info>("info"),
                       });
  }

  explicit TokenizerWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<TokenizerWrap>(info) {
    guarded(info, [&]() -> Napi::Value {
      if (info.Length() < 1 || !info[0].IsString())
        throw invalid(info.Env(), "NativeTokenizer(path): path must be a string");
      tokenizer_ = Tokenizer::open(info[0].As<Napi::String>().Utf8Value());
      info.This().As<Napi::Object>().TypeTag(&kTokenizerTag);
      return info.Env().Undefined();
    });
  }

  std::shared_ptr<const Tokenizer> shared() const { return tokenizer_; }

 private:
  // tokenize(text, addSpecial, parseSpecial) -> Uint32Array; text is a string or its UTF-8 bytes
  // (a Uint8Array, which the SDK has checked is UTF-8).
  Napi::Value tokenize(const Napi::CallbackInfo& info) {
    return guarded(info, [&]() -> Napi::Value {
      if (const std::optional<Napi::Uint8Array> bytes = utf8_bytes(info)) {
        return to_js(info.Env(), tokenizer_->tokenize(view(*bytes), flag(info, 1), flag(info, 2)));
      }
      const std::string text = text_arg(info).Utf8Value();
      return to_js(info.Env(), tokenizer_->tokenize(text, flag(info, 1), flag(info, 2)));
    });
  }

  // tokenizeAsync(text, addSpecial, parseSpecial) -> Promise<Uint32Array>: the same on a worker
  // thread, at low priority (8 MB of text is seconds of a core that the engine's threads may need).
  // A string is copied first (a long text must not hold the JS thread while it tokenizes); UTF-8
  // bytes are read where they are, held by a reference until the promise settles: a multi-megabyte
  // copy on the JS thread is what the bytes are for. The ids come back in their own memory, not copied.
  Napi::Value tokenize_async(const Napi::CallbackInfo& info) {
    return guarded(info, [&]() -> Napi::Value {
      const bool add_special = flag(info, 1);
      const bool parse_special = flag(info, 2);
      auto convert = [](Napi::Env env, std::vector<uint32_t>& ids) -> Napi::Value { return to_js_moved(env, ids); };
      if (const std::optional<Napi::Uint8Array> bytes = utf8_bytes(info)) {
        return run_async(
            info.Env(),
            [tokenizer = tokenizer_, text = view(*bytes),
             held = std::make_shared<Napi::Reference<Napi::Uint8Array>>(Napi::Persistent(*bytes)), add_special,
             parse_special] {
              return at_low_priority([&] { return tokenizer->tokenize(text, add_special, parse_special); });
            },
            convert);
      }
      return run_async(
          info.Env(),
          [tokenizer = tokenizer_, text = text_arg(info).Utf8Value(), add_special, parse_special] {
            return at_low_priority([&] { return tokenizer->tokenize(text, add_special, parse_special); });
          },
          convert);
    });
  }

  // The first argument when it is UTF-8 bytes (a Uint8Array).
  static std::optional<Napi::Uint8Array> utf8_bytes(const Napi::CallbackInfo& info) {
    if (info.Length() < 1 || !info[0].IsTypedArray() ||
        info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
      return std::nullopt;
    }
    return info[0].As<Napi::Uint8Array>();
  }

  static std::string_view view(const Napi::Uint8Array& bytes) {
    return {reinterpret_cast<const char*>(bytes.Data()), bytes.ByteLength()};
  }

  // The first argument when it is a string; refused by name when it is neither a string nor UTF-8 bytes.
  static Napi::String text_arg(const Napi::CallbackInfo& info) {
    if (info.Length() < 1 || !info[0].IsString()) {
      throw invalid(info.Env(), "tokenize(text): text must be a string or its UTF-8 bytes (a Uint8Array)");
    }
    return info[0].As<Napi::String>();
  }

  // detokenize(tokens, special) -> string (invalid UTF-8 shows as U+FFFD)
  Napi::Value detokenize(const Napi::CallbackInfo& info) {
    return guarded(info, [&]() -> Napi::Value {
      return utf8(info.Env(), tokenizer_->detokenize(token_ids(info, 0), flag(info, 1)));
    });
  }

  // The vocabulary's facts that a caller needs: size, special ids and flags.
  Napi::Value info(const Napi::CallbackInfo& info) {
    return guarded(info, [&]() -> Napi::Value {
      const tokenizer::Vocab& v = tokenizer_->vocab();
      Napi::Env env = info.Env();
      Napi::Object o = Napi::Object::New(env);
      auto id = [&](int64_t t) -> Napi::Value { return t < 0 ? env.Null() : Napi::Number::New(env, double(t)); };
      o.Set("model", v.kind == tokenizer::VocabKind::kSpm ? "llama" : "gpt2");
      o.Set("size", double(v.size()));
      o.Set("bos", id(v.bos));
      o.Set("eos", id(v.eos));
      o.Set("eot", id(v.eot));
      o.Set("addBos", v.add_bos);
      o.Set("addEos", v.add_eos);
      return o;
    });
  }

  std::shared_ptr<const Tokenizer> tokenizer_;
};

class DecoderWrap : public Napi::ObjectWrap<DecoderWrap> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "NativeStreamDecoder",
                       {InstanceMethod<&DecoderWrap::push>("push"), InstanceMethod<&DecoderWrap::flush>("flush")});
  }

  // new NativeStreamDecoder(nativeTokenizer, special)
  explicit DecoderWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DecoderWrap>(info) {
    guarded(info, [&]() -> Napi::Value {
      if (info.Length() < 1 || !info[0].IsObject() || !info[0].As<Napi::Object>().CheckTypeTag(&kTokenizerTag)) {
        throw invalid(info.Env(), "NativeStreamDecoder(tokenizer, special): tokenizer must be a NativeTokenizer");
      }
      decoder_.emplace(TokenizerWrap::Unwrap(info[0].As<Napi::Object>())->shared(), flag(info, 1));
      return info.Env().Undefined();
    });
  }

 private:
  Napi::Value push(const Napi::CallbackInfo& info) {
    return guarded(info, [&]() -> Napi::Value { return utf8(info.Env(), ready().push(token_ids(info, 0))); });
  }

  Napi::Value flush(const Napi::CallbackInfo& info) {
    return guarded(info, [&]() -> Napi::Value { return utf8(info.Env(), ready().flush()); });
  }

  StreamDecoder& ready() { return *decoder_; }

  // Set by the constructor, which throws otherwise.
  std::optional<StreamDecoder> decoder_;
};

}  // namespace

std::shared_ptr<const Tokenizer> tokenizer_argument(const Napi::Value& value, const char* what) {
  if (!value.IsObject() || !value.As<Napi::Object>().CheckTypeTag(&kTokenizerTag)) {
    throw invalid(value.Env(), std::string(what) + " must be a NativeTokenizer");
  }
  return TokenizerWrap::Unwrap(value.As<Napi::Object>())->shared();
}

void register_tokenizer(Napi::Env env, Napi::Object exports) {
  exports.Set("NativeTokenizer", TokenizerWrap::define(env));
  exports.Set("NativeStreamDecoder", DecoderWrap::define(env));
}

}  // namespace bloomery::addon
