// The shape of a causal self-attention call with grouped-query heads.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace zb {

// The fused projection qkv holds, for each of the batch*seq tokens, the query heads, then the key heads,
// then the value heads: [q_0..q_{H-1} | k_0..k_{KV-1} | v_0..v_{KV-1}], each head_dim wide.
// Query head h attends with key/value head h / (heads / kv_heads).
struct AttentionShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;

  ZB_HOST_DEVICE int64_t tokens() const { return batch * seq; }
  ZB_HOST_DEVICE int64_t q_width() const { return heads * head_dim; }
  ZB_HOST_DEVICE int64_t kv_width() const { return kv_heads * head_dim; }
  ZB_HOST_DEVICE int64_t qkv_width() const { return q_width() + 2 * kv_width(); }
  ZB_HOST_DEVICE int64_t group_size() const { return heads / kv_heads; }
};

}  // namespace zb
