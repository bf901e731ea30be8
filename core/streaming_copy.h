// Copies with non-temporal (streaming) stores, for outputs that will not be read back before they leave the cache.
#pragma once

#include <cstddef>

namespace strata {

// memcpy whose stores bypass the cache: a streaming store skips the read of each destination line that a plain
// store makes. 64-byte stores (AVX-512) where the CPU has them, 16-byte ones (SSE2, the x86-64 baseline) otherwise,
// memcpy elsewhere. Call stream_fence() before the data is handed to another thread or process.
void copy_streaming(char* dst, const char* src, std::size_t len);
void stream_fence();

// Copies at least this large whose output is not read back at once (a collective's output, an upload ahead of its
// use) are worth streaming: the output would be evicted from the cache before it was read.
constexpr std::size_t kStreamingCopyMin = std::size_t{8} << 20;

}  // namespace strata
