/**
 * GGUF files: readGgufInfo() (native, mmap) and writeGguf() (TypeScript, for tools and tests).
 * @module
 */
export { readGgufInfo } from "./gguf/read.js";
export { writeGguf } from "./gguf/write.js";
