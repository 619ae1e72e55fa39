// readGgufInfo(): placeholder registration until the GGUF reader lands.
#include "addon/bindings.h"

namespace bloomery::addon {

void register_gguf(Napi::Env, Napi::Object) {}

}  // namespace bloomery::addon
