// The 8-bit block update with AVX2, eight lanes: the AVX-512 file's steps (see cpu_optimizer_8bit.h) with
// comparisons as lane masks and blends where AVX-512 has mask registers. The two mirror each other rather than
// share a template: each function carries its instruction set as a target attribute, which a template cannot
// vary by instantiation, and compiling a whole file for AVX-512 would let its copies of shared inline functions
// reach CPUs without it (the fp32 levels in cpu_optimizer.cc mirror each other for the same reason).
#include <immintrin.h>


#include "core/check.h"
#include "kernels/adam_element.h"
#include "offload/cpu_optimizer_8bit.h"

namespace zb {

namespace {

#define ZB_AVX2 __attribute__((target("avx2")))

// Lanes where a <= b (all ones), else zero.
ZB_AVX2 inline __m256i at_most(__m256 a, __m256 b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LE_OQ)); }
ZB_AVX2 inline __m256i choose(__m256i when, __m256i yes, __m256i no) { return _mm256_blendv_epi8(no, yes, when); }
ZB_AVX2 inline __m256 choose(__m256i when, __m256 yes, __m256 no) {
  return _mm256_blendv_ps(no, yes, _mm256_castsi256_ps(when));
}

ZB_AVX2 inline __m256i mul_hi(__m256i a, __m256i k) {
  const __m256i even = _mm256_mul_epu32(a, k);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), k);
  return _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

// Philox4x32-10 of eight counters (groups first_group + lane), then the uniforms of their 32 elements in element
// order: u[j] holds elements 8j to 8j + 7.
ZB_AVX2 void uniforms_of_32(uint64_t seed, uint64_t stream, uint64_t first_group, __m256 u[4]) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32(int32_t(uint32_t(first_group))), lane);
  // The carry into the upper half where the lower wrapped (c0 < lane, unsigned: compared with the sign flipped).
  const __m256i sign = _mm256_set1_epi32(int32_t(0x80000000u));
  const __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(lane, sign), _mm256_xor_si256(c0, sign));
  __m256i c1 = _mm256_sub_epi32(_mm256_set1_epi32(int32_t(uint32_t(first_group >> 32))), carry);
  __m256i c2 = _mm256_set1_epi32(int32_t(uint32_t(stream))), c3 = _mm256_set1_epi32(int32_t(uint32_t(stream >> 32)));
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  const __m256i mul0 = _mm256_set1_epi32(int32_t(0xD2511F53u)), mul1 = _mm256_set1_epi32(int32_t(0xCD9E8D57u));
  for (int round = 0; round < 10; ++round) {
    const __m256i hi0 = mul_hi(c0, mul0), lo0 = _mm256_mullo_epi32(c0, mul0);
    const __m256i hi1 = mul_hi(c2, mul1), lo1 = _mm256_mullo_epi32(c2, mul1);
    c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(int32_t(k0)));
    c1 = lo1;
    c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(int32_t(k1)));
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // A 4 x 4 transpose within each 128-bit half (q_k's half h is group 4h + k), then the halves paired.
  const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
  const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
  const __m256i q0 = _mm256_unpacklo_epi64(t0, t2), q1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i q2 = _mm256_unpacklo_epi64(t1, t3), q3 = _mm256_unpackhi_epi64(t1, t3);
  const __m256i e[4] = {_mm256_permute2x128_si256(q0, q1, 0x20), _mm256_permute2x128_si256(q2, q3, 0x20),
                        _mm256_permute2x128_si256(q0, q1, 0x31), _mm256_permute2x128_si256(q2, q3, 0x31)};
  for (int j = 0; j < 4; ++j) {
    u[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(e[j], 8)), _mm256_set1_ps(0x1.0p-24f));
  }
}

ZB_AVX2 __m256i code_of_sorted(__m256i index, bool is_signed) {
  if (!is_signed) return index;
  // Index 127 is +0 (code 0), 128 is -0 (code 128), above them index - 128; below, 255 - index.
  const __m256i negative = _mm256_cmpgt_epi32(_mm256_set1_epi32(127), index);  // index < 127
  const __m256i plus_zero = _mm256_cmpeq_epi32(index, _mm256_set1_epi32(127));
  const __m256i minus_zero = _mm256_cmpeq_epi32(index, _mm256_set1_epi32(128));
  __m256i code = choose(negative, _mm256_sub_epi32(_mm256_set1_epi32(255), index),
                        _mm256_sub_epi32(index, _mm256_set1_epi32(128)));
  code = choose(minus_zero, _mm256_set1_epi32(128), code);
  return _mm256_andnot_si256(plus_zero, code);
}

ZB_AVX2 __m256i pick_codes(const GatherTables& t, __m256 x, __m256 u, __m256i below, __m256 low, __m256 high) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i none = _mm256_cmpeq_epi32(below, zero), all = _mm256_cmpeq_epi32(below, _mm256_set1_epi32(256));
  const __m256i upper = _mm256_min_epi32(below, _mm256_set1_epi32(255));
  const __m256i lower = _mm256_max_epi32(_mm256_sub_epi32(below, _mm256_set1_epi32(1)), zero);
  const __m256 share = _mm256_div_ps(_mm256_sub_ps(x, low), _mm256_sub_ps(high, low));
  __m256i pick = choose(_mm256_castps_si256(_mm256_cmp_ps(u, share, _CMP_LT_OQ)), upper, lower);
  pick = choose(none, zero, pick);
  pick = choose(all, _mm256_set1_epi32(255), pick);
  return code_of_sorted(pick, t.is_signed);
}

ZB_AVX2 __m256i count_by_search(const GatherTables& t, __m256 x) {
  __m256i below = _mm256_setzero_si256();
  for (int step = 128; step >= 1; step /= 2) {
    const __m256i probe = _mm256_add_epi32(below, _mm256_set1_epi32(step - 1));
    const __m256 value = _mm256_i32gather_ps(t.sorted.data(), probe, 4);
    below = _mm256_add_epi32(below, _mm256_and_si256(at_most(value, x), _mm256_set1_epi32(step)));
  }
  return choose(at_most(_mm256_set1_ps(t.largest), x), _mm256_set1_epi32(256), below);
}

ZB_AVX2 __m256i estimated_count(__m256 x, bool is_signed) {
  const int bits = is_signed ? 7 : 8;
  const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  __m256i decade = _mm256_setzero_si256();
  float top = 1.0f;
  for (int e = 1; e < bits; ++e) {
    top *= 0.1f;  // as count_at_or_below: only the estimate depends on it
    decade = _mm256_sub_epi32(decade, at_most(magnitude, _mm256_set1_ps(top)));
  }
  const __m256 power =
      _mm256_permutevar8x32_ps(_mm256_setr_ps(1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f), decade);
  const __m256i steps = _mm256_sllv_epi32(_mm256_set1_epi32(1), _mm256_sub_epi32(_mm256_set1_epi32(bits - 1), decade));
  const __m256 position = _mm256_div_ps(
      _mm256_mul_ps(_mm256_sub_ps(_mm256_mul_ps(magnitude, power), _mm256_set1_ps(0.1f)), _mm256_cvtepi32_ps(steps)),
      _mm256_set1_ps(0.9f));
  const __m256i within =
      _mm256_min_epi32(_mm256_max_epi32(_mm256_cvttps_epi32(position), _mm256_setzero_si256()), steps);
  const __m256i counted = _mm256_add_epi32(steps, within);
  if (!is_signed) return counted;
  const __m256i negative = _mm256_castps_si256(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  return choose(negative, _mm256_sub_epi32(_mm256_set1_epi32(128), counted),
                _mm256_add_epi32(counted, _mm256_set1_epi32(128)));
}

ZB_AVX2 __m256i stochastic_codes(const GatherTables& t, __m256 x, __m256 u) {
  const __m256i below = estimated_count(x, t.is_signed);
  const __m256i zero = _mm256_setzero_si256(), last = _mm256_set1_epi32(255);
  const __m256i lower = _mm256_sub_epi32(below, _mm256_set1_epi32(1));
  __m256 low = _mm256_i32gather_ps(t.sorted.data(), _mm256_max_epi32(lower, zero), 4);
  __m256 high = _mm256_i32gather_ps(t.sorted.data(), _mm256_min_epi32(below, last), 4);
  low = choose(_mm256_cmpgt_epi32(zero, lower), _mm256_set1_ps(-INFINITY), low);
  high = choose(_mm256_cmpgt_epi32(below, last), _mm256_set1_ps(INFINITY), high);
  const __m256i right = _mm256_and_si256(at_most(low, x), _mm256_castps_si256(_mm256_cmp_ps(x, high, _CMP_LT_OQ)));
  if (_mm256_movemask_ps(_mm256_castsi256_ps(right)) != 0xFF) {
    const __m256i searched = count_by_search(t, x);
    const __m256i upper = _mm256_min_epi32(searched, last);
    const __m256i lower_searched = _mm256_max_epi32(_mm256_sub_epi32(searched, _mm256_set1_epi32(1)), zero);
    return pick_codes(t, x, u, searched, _mm256_i32gather_ps(t.sorted.data(), lower_searched, 4),
                      _mm256_i32gather_ps(t.sorted.data(), upper, 4));
  }
  return pick_codes(t, x, u, below, low, high);
}

// Eight 32-bit lanes' low bytes, in order, to `out`.
ZB_AVX2 inline void store_bytes(uint8_t* out, __m256i lanes) {
  const __m256i low_bytes = _mm256_shuffle_epi8(
      lanes, _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1,
                              -1, -1, -1, -1, -1, -1, -1, -1, -1));
  const __m256i packed = _mm256_permutevar8x32_epi32(low_bytes, _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
}

ZB_AVX2 float quantize(const float* values, int64_t count, float scale, const GatherTables& t, const DynamicMap& map,
                       uint8_t* codes, uint64_t seed, uint64_t stream, uint64_t first) {
  const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
  const __m256 inv = _mm256_set1_ps(inverse), largest = _mm256_set1_ps(scale);
  for (int64_t i = 0; i < count; i += 32) {
    __m256 u[4];
    uniforms_of_32(seed, stream, (first + uint64_t(i)) / 4, u);
    for (int j = 0; j < 4; ++j) {
      const int64_t at = i + 8 * j;
      const __m256 value = _mm256_loadu_ps(values + at);
      store_bytes(codes + at, stochastic_codes(t, _mm256_mul_ps(value, inv), u[j]));
      const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), value);
      int exact = _mm256_movemask_ps(_mm256_cmp_ps(magnitude, largest, _CMP_EQ_OQ));
      while (exact) {  // (one element a block, mostly)
        const int k = __builtin_ctz(unsigned(exact));
        codes[at + k] = map.nearest(values[at + k] * inverse);
        exact &= exact - 1;
      }
    }
  }
  return scale;
}

// The largest of eight non-negative lanes.
ZB_AVX2 inline float largest_lane(__m256 x) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, x);
  float out = 0.0f;
  for (float lane : lanes) out = lane > out ? lane : out;
  return out;
}

}  // namespace

ZB_AVX2 void adam_8bit_block_avx2(const float* master_in, float* master, const float* grad, int64_t count,
                                  const QuantizedMoments& in, const QuantizedMoments& out, int64_t block,
                                  const OptimizerParams& p) {
  ZB_CHECK(count > 0 && count <= kQuantizationBlock && vector_takes_block(count), "a block of ", count, " elements");
  ZB_CHECK(p.kind == OptimizerKind::adamw || p.kind == OptimizerKind::adam, "8-bit moments are Adam's and AdamW's");
  const GatherTables &first = first_tables(), &second = second_tables();
  const AdamElement<float> a = adam_element(p);
  const int64_t begin = block * kQuantizationBlock;
  alignas(32) float m[kQuantizationBlock], v[kQuantizationBlock];
  const __m256 m_scale = _mm256_set1_ps(in.m_scales[block]), v_scale = _mm256_set1_ps(in.v_scales[block]);
  const __m256 grad_scale = _mm256_set1_ps(p.grad_scale), lr = _mm256_set1_ps(a.lr), wd = _mm256_set1_ps(a.wd);
  const __m256 b1 = _mm256_set1_ps(a.b1), b2 = _mm256_set1_ps(a.b2), one_minus_b1 = _mm256_set1_ps(1 - a.b1),
               one_minus_b2 = _mm256_set1_ps(1 - a.b2), bias1 = _mm256_set1_ps(a.bias1),
               bias2 = _mm256_set1_ps(a.bias2), eps = _mm256_set1_ps(a.eps), lr_wd = _mm256_set1_ps(a.lr * a.wd);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  // As the AVX-512 level: MAXPS passes over a NaN in its first operand, as std::max does.
  __m256 m_largest = _mm256_setzero_ps(), v_largest = _mm256_setzero_ps();
  for (int64_t k = 0; k < count; k += 8) {
    const __m256i m_codes =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in.m_codes + begin + k)));
    const __m256i v_codes =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in.v_codes + begin + k)));
    __m256 mk = _mm256_mul_ps(_mm256_i32gather_ps(first.values.data(), m_codes, 4), m_scale);
    __m256 vk = _mm256_mul_ps(_mm256_i32gather_ps(second.values.data(), v_codes, 4), v_scale);
    // AdamElement<float>, operation for operation.
    __m256 param = _mm256_loadu_ps(master_in + k);
    __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + k), grad_scale);
    if (!a.decoupled) g = _mm256_add_ps(g, _mm256_mul_ps(wd, param));
    mk = _mm256_add_ps(_mm256_mul_ps(b1, mk), _mm256_mul_ps(one_minus_b1, g));
    vk = _mm256_add_ps(_mm256_mul_ps(b2, vk), _mm256_mul_ps(_mm256_mul_ps(one_minus_b2, g), g));
    if (a.decoupled) param = _mm256_sub_ps(param, _mm256_mul_ps(lr_wd, param));
    const __m256 denominator = _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(vk, bias2)), eps);
    param = _mm256_sub_ps(param, _mm256_div_ps(_mm256_mul_ps(lr, _mm256_div_ps(mk, bias1)), denominator));
    _mm256_storeu_ps(master + k, param);
    _mm256_store_ps(m + k, mk);
    _mm256_store_ps(v + k, vk);
    m_largest = _mm256_max_ps(_mm256_andnot_ps(sign, mk), m_largest);
    v_largest = _mm256_max_ps(_mm256_andnot_ps(sign, vk), v_largest);
  }
  const float m_new_scale = largest_lane(m_largest), v_new_scale = largest_lane(v_largest);
  const uint64_t element = out.first_element + uint64_t(begin), stream = 2 * uint64_t(p.step);
  out.m_scales[block] = quantize(m, count, m_new_scale, first, DynamicMap::signed_map(), out.m_codes + begin,
                                 out.seed, stream, element);
  out.v_scales[block] = quantize(v, count, v_new_scale, second, DynamicMap::unsigned_map(), out.v_codes + begin,
                                 out.seed, stream + 1, element);
}

}  // namespace zb
