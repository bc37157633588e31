// Embedding lookup and its gradient (a scatter-add into the table rows the ids select).
#include <algorithm>

#include "kernels/cpu/cpu_ops.h"

namespace zb::cpu {

template <typename T>
void embedding_forward(const int32_t* ids, const T* table, T* out, int64_t n, int64_t c, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < n; ++row) {
    const T* src = table + static_cast<int64_t>(ids[row]) * c;
    T* dst = out + row * c;
    for (int64_t j = 0; j < c; ++j) dst[j] = accumulate ? dst[j] + src[j] : src[j];
  }
}

template <typename T>
void embedding_backward(const int32_t* ids, const T* dout, T* dtable, int64_t n, int64_t c) {
  // Threads own disjoint column blocks and visit the tokens in order, so repeated ids add up in one fixed order.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (c + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kBlock, end = std::min(c, begin + kBlock);
    for (int64_t row = 0; row < n; ++row) {
      T* dst = dtable + static_cast<int64_t>(ids[row]) * c;
      const T* src = dout + row * c;
      for (int64_t j = begin; j < end; ++j) dst[j] += src[j];
    }
  }
}

#define ZB_INSTANTIATE(T)                                                                   \
  template void embedding_forward<T>(const int32_t*, const T*, T*, int64_t, int64_t, bool); \
  template void embedding_backward<T>(const int32_t*, const T*, T*, int64_t, int64_t);
ZB_INSTANTIATE(float)
ZB_INSTANTIATE(double)

}  // namespace zb::cpu
