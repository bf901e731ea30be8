// copy_streaming against memcpy: every byte, at every alignment of source and destination, over lengths around the
// store widths, with the bytes either side of the destination untouched.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/streaming_copy.h"

namespace strata {
namespace {

TEST(StreamingCopy, EqualsMemcpyAtEveryAlignment) {
  const std::size_t lengths[] = {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000, 4096 + 37};
  std::vector<char> src(8192 + 128), dst(8192 + 256);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 131 + 7);
  int wrong = 0;
  for (std::size_t len : lengths)
    for (std::size_t so = 0; so < 64; so += 7)
      for (std::size_t d = 0; d < 64; d += 5) {
        std::fill(dst.begin(), dst.end(), char(0x5a));
        copy_streaming(dst.data() + 64 + d, src.data() + so, len);
        stream_fence();
        for (std::size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= 64 + d && i < 64 + d + len;
          wrong += dst[i] != (inside ? src[so + i - 64 - d] : char(0x5a));
        }
      }
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace strata
