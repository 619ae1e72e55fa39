// readGgufInfo(path): parses a GGUF file (or split model) on a worker thread and resolves
// to the RawGgufInfo object of src/gguf/types.ts.
#include <cstring>
#include <optional>
#include <string>

#include "addon/async.h"
#include "addon/bindings.h"
#include "addon/errors.h"
#include "gguf/gguf_file.h"

namespace bloomery::addon {

namespace {

using gguf::ValueType;

void check(napi_env env, napi_status status) {
  if (status != napi_ok) throw Napi::Error::New(env);
}

napi_value utf8(napi_env env, std::string_view s) {
  napi_value v;
  check(env, napi_create_string_utf8(env, s.data(), s.size(), &v));
  return v;
}

// Defines an own property, so a key such as "__proto__" is data, not a prototype change.
void define(napi_env env, napi_value object, std::string_view key, napi_value value) {
  napi_property_descriptor d{};
  d.name = utf8(env, key);
  d.value = value;
  d.attributes = static_cast<napi_property_attributes>(napi_writable | napi_enumerable | napi_configurable);
  check(env, napi_define_properties(env, object, 1, &d));
}

std::optional<napi_typedarray_type> typed_array_type(ValueType t) {
  switch (t) {
    case ValueType::U8:
      return napi_uint8_array;
    case ValueType::I8:
      return napi_int8_array;
    case ValueType::U16:
      return napi_uint16_array;
    case ValueType::I16:
      return napi_int16_array;
    case ValueType::U32:
      return napi_uint32_array;
    case ValueType::I32:
      return napi_int32_array;
    case ValueType::F32:
      return napi_float32_array;
    case ValueType::F64:
      return napi_float64_array;
    case ValueType::U64:
      return napi_biguint64_array;
    case ValueType::I64:
      return napi_bigint64_array;
    default:
      return std::nullopt;
  }
}

napi_value scalar_to_js(napi_env env, ValueType type, const uint8_t* p) {
  gguf::Value v;
  v.type = type;
  v.bytes = p;
  napi_value out;
  switch (type) {
    case ValueType::Bool:
      check(env, napi_get_boolean(env, *p != 0, &out));
      break;
    case ValueType::U64:
      check(env, napi_create_bigint_uint64(env, *v.to_uint(), &out));
      break;
    case ValueType::I64: {
      int64_t n;
      std::memcpy(&n, p, sizeof n);
      check(env, napi_create_bigint_int64(env, n, &out));
      break;
    }
    default:
      check(env, napi_create_double(env, *v.to_double(), &out));
  }
  return out;
}

napi_value value_to_js(napi_env env, const gguf::Value& v) {
  if (v.type == ValueType::String) return utf8(env, v.string);
  if (v.type != ValueType::Array) return scalar_to_js(env, v.type, v.bytes);

  napi_value out;
  if (const std::optional<napi_typedarray_type> ta = typed_array_type(v.element_type)) {
    const size_t bytes = v.count * gguf::value_type_size(v.element_type);
    void* data;
    napi_value buffer;
    check(env, napi_create_arraybuffer(env, bytes, &data, &buffer));
    if (bytes) std::memcpy(data, v.bytes, bytes);
    check(env, napi_create_typedarray(env, *ta, v.count, buffer, 0, &out));
    return out;
  }
  check(env, napi_create_array_with_length(env, v.count, &out));
  for (uint64_t i = 0; i < v.count; ++i) {
    napi_value e;
    if (v.element_type == ValueType::String) {
      e = utf8(env, v.strings[i]);
    } else if (v.element_type == ValueType::Bool) {
      check(env, napi_get_boolean(env, v.bytes[i] != 0, &e));
    } else {
      e = value_to_js(env, v.arrays[i]);
    }
    check(env, napi_set_element(env, out, uint32_t(i), e));
  }
  return out;
}

Napi::Object info_to_js(Napi::Env env, const gguf::GgufFile& file) {
  const gguf::FileInfo& first = file.files().front();
  Napi::Object info = Napi::Object::New(env);
  info.Set("path", first.path);
  info.Set("version", first.version);
  info.Set("alignment", first.alignment);

  Napi::Array files = Napi::Array::New(env, file.files().size());
  for (size_t i = 0; i < file.files().size(); ++i) {
    const gguf::FileInfo& f = file.files()[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("path", f.path);
    o.Set("bytes", double(f.size));
    o.Set("version", f.version);
    o.Set("dataOffset", double(f.data_offset));
    o.Set("alignment", f.alignment);
    o.Set("tensorCount", double(f.tensor_count));
    files.Set(uint32_t(i), o);
  }
  info.Set("files", files);

  Napi::Object metadata = Napi::Object::New(env);
  Napi::Object types = Napi::Object::New(env);
  for (const gguf::KeyValue& kv : file.metadata()) {
    define(env, metadata, kv.key, value_to_js(env, kv.value));
    define(env, types, kv.key, utf8(env, kv.value.type_name()));
  }
  info.Set("metadata", metadata);
  info.Set("metadataTypes", types);

  Napi::Array tensors = Napi::Array::New(env, file.tensors().size());
  for (size_t i = 0; i < file.tensors().size(); ++i) {
    const gguf::Tensor& t = file.tensors()[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", Napi::String::New(env, t.name.data(), t.name.size()));
    o.Set("type", Napi::String::New(env, t.type.name.data(), t.type.name.size()));
    o.Set("typeId", t.type.id);
    Napi::Array shape = Napi::Array::New(env, t.n_dims);
    for (uint32_t d = 0; d < t.n_dims; ++d) shape.Set(d, double(t.shape[d]));
    o.Set("shape", shape);
    o.Set("elements", double(t.elements));
    o.Set("offset", double(t.offset));
    o.Set("bytes", double(t.bytes));
    o.Set("file", t.file);
    tensors.Set(uint32_t(i), o);
  }
  info.Set("tensors", tensors);

  Napi::Array warnings = Napi::Array::New(env, file.warnings().size());
  for (size_t i = 0; i < file.warnings().size(); ++i) {
    const gguf::FileWarning& w = file.warnings()[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("code", w.code);
    o.Set("message", w.message);
    o.Set("tensor", w.tensor);
    warnings.Set(uint32_t(i), o);
  }
  info.Set("warnings", warnings);
  return info;
}

Napi::Value read_gguf_info(const Napi::CallbackInfo& info) {
  return guarded(info, [&]() -> Napi::Value {
    if (info.Length() < 1 || !info[0].IsString()) {
      throw to_js_error(info.Env(), "INVALID_ARGUMENT", "readGgufInfo(path): path must be a string");
    }
    return run_async(
        info.Env(), [path = info[0].As<Napi::String>().Utf8Value()] { return gguf::GgufFile::open(path); },
        [](Napi::Env env, const gguf::GgufFile& file) { return info_to_js(env, file); });
  });
}

}  // namespace

void register_gguf(Napi::Env env, Napi::Object exports) {
  exports.Set("readGgufInfo", Napi::Function::New(env, read_gguf_info, "readGgufInfo"));
}

}  // namespace bloomery::addon
