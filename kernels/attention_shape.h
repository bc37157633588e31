// The shape of a causal self-attention call with grouped-query heads, optionally limited to a sliding window and with
// a softmax scale of the model's own.
#pragma once

#include <cmath>
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
  // Sliding-window attention: query t attends to keys u with t - window < u <= t (the window's latest positions,
  // itself included, as Hugging Face's sliding-window mask); 0: every u <= t.
  int64_t window = 0;
  // The scale of the scores q.k before the softmax; 0: 1/sqrt(head_dim). Gemma 3 scales by
  // query_pre_attn_scalar^-0.5, which differs from head_dim^-0.5 in some of its models (27B: 168 against 128).
  double softmax_scale = 0;

  ZB_HOST_DEVICE int64_t tokens() const { return batch * seq; }
  // The first key query t attends to.
  ZB_HOST_DEVICE int64_t first_key(int64_t t) const { return window > 0 && t >= window ? t - window + 1 : 0; }
  // The last query that attends to key u (the sequence's last where the window reaches past it).
  ZB_HOST_DEVICE int64_t last_query(int64_t u) const {
    return window > 0 && u + window < seq ? u + window - 1 : seq - 1;
  }
  // Whether the window leaves out any key of a causal attention over seq tokens.
  ZB_HOST_DEVICE bool banded() const { return window > 0 && window < seq; }
  // The keys a query's row spans for FLOP counts (the causal mask not discounted): the window, or the sequence.
  ZB_HOST_DEVICE int64_t key_span() const { return banded() ? window : seq; }
  // Whether the scores are scaled by 1/sqrt(head_dim).
  ZB_HOST_DEVICE bool default_scale() const { return softmax_scale == 0; }
  // The scores' scale: softmax_scale, or 1/sqrt(head_dim) where that is 0 (host code).
  double scores_scale() const { return default_scale() ? 1.0 / std::sqrt(double(head_dim)) : softmax_scale; }
  ZB_HOST_DEVICE int64_t q_width() const { return heads * head_dim; }
  ZB_HOST_DEVICE int64_t kv_width() const { return kv_heads * head_dim; }
  ZB_HOST_DEVICE int64_t qkv_width() const { return q_width() + 2 * kv_width(); }
  ZB_HOST_DEVICE int64_t group_size() const { return heads / kv_heads; }
};

}  // namespace zb
