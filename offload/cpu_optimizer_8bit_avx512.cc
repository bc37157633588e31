#include "offload/cpu_optimizer_8bit.h"

#include <immintrin.h>

#include <array>
#include <cmath>

#include "core/check.h"
#include "kernels/adam_element.h"
#include "kernels/blockwise_quantization.h"

namespace zb {

namespace {

#define ZB_AVX512 __attribute__((target("avx512f")))

// The high halves of the 32 x 32-bit products of the lanes of a with k.
ZB_AVX512 inline __m512i mul_hi(__m512i a, __m512i k) {
  const __m512i even = _mm512_mul_epu32(a, k);                          // lanes 0, 2, ...: 64-bit products
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), k);  // lanes 1, 3, ...
  return _mm512_mask_blend_epi32(__mmask16(0xAAAA), _mm512_srli_epi64(even, 32), odd);
}

// Philox4x32-10 (core/random.h's philox4x32) of sixteen counters at once: word k of group `first_group` + lane,
// for stream `stream` under `seed`; then the uniform numbers of the 64 elements of those groups in element order
// (group g's words 0-3 are elements 4g to 4g + 3): u[j] holds elements 16j to 16j + 15.
ZB_AVX512 void uniforms_of_64(uint64_t seed, uint64_t stream, uint64_t first_group, __m512 u[4]) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32(int32_t(uint32_t(first_group))), lane);
  // The carry into the upper half where the lower wrapped (c0 < lane, unsigned).
  const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, lane);
  __m512i c1 = _mm512_mask_add_epi32(_mm512_set1_epi32(int32_t(uint32_t(first_group >> 32))), carry,
                                     _mm512_set1_epi32(int32_t(uint32_t(first_group >> 32))), _mm512_set1_epi32(1));
  __m512i c2 = _mm512_set1_epi32(int32_t(uint32_t(stream))), c3 = _mm512_set1_epi32(int32_t(uint32_t(stream >> 32)));
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  const __m512i mul0 = _mm512_set1_epi32(int32_t(0xD2511F53u)), mul1 = _mm512_set1_epi32(int32_t(0xCD9E8D57u));
  for (int round = 0; round < 10; ++round) {
    const __m512i hi0 = mul_hi(c0, mul0), lo0 = _mm512_mullo_epi32(c0, mul0);
    const __m512i hi1 = mul_hi(c2, mul1), lo1 = _mm512_mullo_epi32(c2, mul1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(int32_t(k0)));
    c1 = lo1;
    c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(int32_t(k1)));
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // Words to elements: a 4 x 4 transpose within each 128-bit chunk (t_q's chunk c is group 4c + q), then one of
  // the chunks (e_j is groups 4j to 4j + 3).
  const __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
  const __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
  const __m512i q0 = _mm512_unpacklo_epi64(t0, t2), q1 = _mm512_unpackhi_epi64(t0, t2);
  const __m512i q2 = _mm512_unpacklo_epi64(t1, t3), q3 = _mm512_unpackhi_epi64(t1, t3);
  const __m512i a0 = _mm512_shuffle_i32x4(q0, q1, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i a1 = _mm512_shuffle_i32x4(q2, q3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i a2 = _mm512_shuffle_i32x4(q0, q1, _MM_SHUFFLE(3, 2, 3, 2));
  const __m512i a3 = _mm512_shuffle_i32x4(q2, q3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m512i e[4] = {_mm512_shuffle_i32x4(a0, a1, _MM_SHUFFLE(2, 0, 2, 0)),
                        _mm512_shuffle_i32x4(a0, a1, _MM_SHUFFLE(3, 1, 3, 1)),
                        _mm512_shuffle_i32x4(a2, a3, _MM_SHUFFLE(2, 0, 2, 0)),
                        _mm512_shuffle_i32x4(a2, a3, _MM_SHUFFLE(3, 1, 3, 1))};
  // rounding_uniform: the top 24 bits, exact in fp32, times 2^-24.
  for (int j = 0; j < 4; ++j) {
    u[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(e[j], 8)), _mm512_set1_ps(0x1.0p-24f));
  }
}

// The code of each sorted index (DynamicMap::sorted_codes, by the maps' order): an unsigned map's codes are in
// increasing order; a signed map's are the negative values' from the largest magnitude (codes 255 down to 129),
// then +0 (code 0), -0 (code 128) and the positive values (codes 1 to 127).
ZB_AVX512 __m512i code_of_sorted(__m512i index, bool is_signed) {
  if (!is_signed) return index;
  // Index 127 is +0 (code 0), 128 is -0 (code 128), above them index - 128; below, 255 - index.
  const __m512i positive = _mm512_sub_epi32(index, _mm512_set1_epi32(128));
  __m512i code = _mm512_mask_sub_epi32(positive, _mm512_cmplt_epi32_mask(index, _mm512_set1_epi32(127)),
                                       _mm512_set1_epi32(255), index);
  code = _mm512_mask_mov_epi32(code, _mm512_cmpeq_epi32_mask(index, _mm512_set1_epi32(128)), _mm512_set1_epi32(128));
  return _mm512_mask_mov_epi32(code, _mm512_cmpeq_epi32_mask(index, _mm512_set1_epi32(127)), _mm512_setzero_si512());
}

// DynamicMap::round_stochastically of sixteen quotients x with uniforms u, given `below`, the count of sorted
// values at or below each x: the upper of the two values around x where u is below x's share of their gap.
// low and high are those two values (any where below is 0 or 256, whose codes are the ends).
ZB_AVX512 __m512i pick_codes(const GatherTables& t, __m512 x, __m512 u, __m512i below, __m512 low, __m512 high) {
  const __mmask16 none = _mm512_cmpeq_epi32_mask(below, _mm512_setzero_si512());
  const __mmask16 all = _mm512_cmpeq_epi32_mask(below, _mm512_set1_epi32(256));
  const __m512i upper = _mm512_min_epi32(below, _mm512_set1_epi32(255));
  const __m512i lower = _mm512_max_epi32(_mm512_sub_epi32(below, _mm512_set1_epi32(1)), _mm512_setzero_si512());
  const __m512 share = _mm512_div_ps(_mm512_sub_ps(x, low), _mm512_sub_ps(high, low));
  __m512i pick = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(u, share, _CMP_LT_OQ), lower, upper);
  pick = _mm512_mask_mov_epi32(pick, none, _mm512_setzero_si512());
  pick = _mm512_mask_mov_epi32(pick, all, _mm512_set1_epi32(255));
  return code_of_sorted(pick, t.is_signed);
}

// The count of sorted values at or below each x by a binary search: eight dependent gathers (the fallback of
// stochastic_codes).
ZB_AVX512 __m512i count_by_search(const GatherTables& t, __m512 x) {
  __m512i below = _mm512_setzero_si512();  // up to 255
  for (int step = 128; step >= 1; step /= 2) {
    const __m512i probe = _mm512_add_epi32(below, _mm512_set1_epi32(step - 1));
    const __m512 value = _mm512_i32gather_ps(probe, t.sorted.data(), 4);
    below = _mm512_mask_add_epi32(below, _mm512_cmp_ps_mask(value, x, _CMP_LE_OQ), below, _mm512_set1_epi32(step));
  }
  const __mmask16 top = _mm512_cmp_ps_mask(_mm512_set1_ps(t.largest), x, _CMP_LE_OQ);
  return _mm512_mask_mov_epi32(below, top, _mm512_set1_epi32(256));
}

// Where the count of sorted values at or below x falls, from the map's structure (see the header of
// kernels/blockwise_quantization.h): |x| in decade e (of 10^-(e+1) to 10^-e) lies after the 2^b codes of the
// smaller magnitudes (b = bits - 1 - e) and after floor((|x| 10^e - 0.1) 2^b / 0.9) of its decade's; a signed
// map's negative values come first, in decreasing magnitude. An estimate: floats round, and at a value's own
// magnitude it counts that value on one side or the other; stochastic_codes reads the values around it.
ZB_AVX512 __m512i estimated_count(__m512 x, bool is_signed) {
  const int bits = is_signed ? 7 : 8;
  const __m512 magnitude = _mm512_abs_ps(x);
  // The decades' upper ends, 10^-e, as the maps compute them (a value's decade is then exact but for rounding).
  static const std::array<float, 8> kTops = [] {
    std::array<float, 8> tops{};
    for (int e = 0; e < 8; ++e) tops[size_t(e)] = float(std::pow(10.0, -e));
    return tops;
  }();
  __m512i decade = _mm512_setzero_si512();
  for (int e = 1; e < bits; ++e) {
    decade = _mm512_mask_add_epi32(decade, _mm512_cmp_ps_mask(magnitude, _mm512_set1_ps(kTops[size_t(e)]), _CMP_LE_OQ),
                                   decade, _mm512_set1_epi32(1));
  }
  const __m512 power = _mm512_permutexvar_ps(
      decade, _mm512_setr_ps(1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 0, 0, 0, 0, 0, 0, 0, 0));
  // 2^b, b = bits - 1 - e, as an integer and as a float.
  const __m512i steps = _mm512_sllv_epi32(_mm512_set1_epi32(1), _mm512_sub_epi32(_mm512_set1_epi32(bits - 1), decade));
  const __m512 position = _mm512_div_ps(
      _mm512_mul_ps(_mm512_sub_ps(_mm512_mul_ps(magnitude, power), _mm512_set1_ps(0.1f)), _mm512_cvtepi32_ps(steps)),
      _mm512_set1_ps(0.9f));
  const __m512i within = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvttps_epi32(position), _mm512_setzero_si512()), steps);
  const __m512i counted = _mm512_add_epi32(steps, within);  // magnitude codes at or below |x|, 0's included
  if (!is_signed) return counted;
  // x >= 0: the 127 negative values, the two zeros, the positive magnitudes counted; x < 0: the negative values of
  // a larger magnitude.
  const __mmask16 negative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_sub_epi32(_mm512_add_epi32(counted, _mm512_set1_epi32(128)), negative, _mm512_set1_epi32(128),
                               counted);
}

// DynamicMap::round_stochastically of sixteen quotients x with uniforms u. The estimated count of sorted values
// at or below x is checked against the two values around it (two independent gathers, where a binary search
// would chain eight): a lane whose estimate was off, at a value's own magnitude, sends the vector to the search.
ZB_AVX512 __m512i stochastic_codes(const GatherTables& t, __m512 x, __m512 u) {
  const __m512i below = estimated_count(x, t.is_signed);
  const __m512i zero = _mm512_setzero_si512(), last = _mm512_set1_epi32(255);
  const __m512i lower = _mm512_sub_epi32(below, _mm512_set1_epi32(1));
  __m512 low = _mm512_i32gather_ps(_mm512_max_epi32(lower, zero), t.sorted.data(), 4);
  __m512 high = _mm512_i32gather_ps(_mm512_min_epi32(below, last), t.sorted.data(), 4);
  // Before the first value, and past the last: none to count, and none above.
  low = _mm512_mask_mov_ps(low, _mm512_cmplt_epi32_mask(lower, zero), _mm512_set1_ps(-INFINITY));
  high = _mm512_mask_mov_ps(high, _mm512_cmpgt_epi32_mask(below, last), _mm512_set1_ps(INFINITY));
  const __mmask16 right = _mm512_cmp_ps_mask(low, x, _CMP_LE_OQ) & _mm512_cmp_ps_mask(x, high, _CMP_LT_OQ);
  if (right != 0xFFFF) {
    const __m512i searched = count_by_search(t, x);
    const __m512i upper = _mm512_min_epi32(searched, last);
    const __m512i lower_searched = _mm512_max_epi32(_mm512_sub_epi32(searched, _mm512_set1_epi32(1)), zero);
    return pick_codes(t, x, u, searched, _mm512_i32gather_ps(lower_searched, t.sorted.data(), 4),
                      _mm512_i32gather_ps(upper, t.sorted.data(), 4));
  }
  return pick_codes(t, x, u, below, low, high);
}

// Quantizes one moment of the block (values[0, count)) into codes with its new scale, as quantize_block does
// with stochastic rounding: the element of the largest magnitude to its nearest code.
ZB_AVX512 float quantize(const float* values, int64_t count, float scale, const GatherTables& t, const DynamicMap& map,
                         uint8_t* codes, uint64_t seed, uint64_t stream, uint64_t first) {
  const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
  const __m512 inv = _mm512_set1_ps(inverse), largest = _mm512_set1_ps(scale);
  const __m512i magnitude_bits = _mm512_set1_epi32(0x7fffffff);
  for (int64_t i = 0; i < count; i += 64) {
    __m512 u[4];
    uniforms_of_64(seed, stream, (first + uint64_t(i)) / 4, u);
    for (int j = 0; j < 4; ++j) {
      const int64_t at = i + 16 * j;
      const __m512 value = _mm512_loadu_ps(values + at);
      const __m512 x = _mm512_mul_ps(value, inv);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + at), _mm512_cvtepi32_epi8(stochastic_codes(t, x, u[j])));
      const __m512 magnitude = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(value), magnitude_bits));
      __mmask16 exact = _mm512_cmp_ps_mask(magnitude, largest, _CMP_EQ_OQ);
      while (exact) {  // (one element a block, mostly)
        const int k = __builtin_ctz(exact);
        codes[at + k] = map.nearest(values[at + k] * inverse);
        exact &= __mmask16(exact - 1);
      }
    }
  }
  return scale;
}

}  // namespace

ZB_AVX512 void adam_8bit_block_avx512(const float* master_in, float* master, const float* grad, int64_t count,
                                      const QuantizedMoments& in, const QuantizedMoments& out, int64_t block,
                                      const OptimizerParams& p) {
  ZB_CHECK(count > 0 && count <= kQuantizationBlock && vector_takes_block(count), "a block of ", count, " elements");
  ZB_CHECK(p.kind == OptimizerKind::adamw || p.kind == OptimizerKind::adam, "8-bit moments are Adam's and AdamW's");
  const GatherTables &first = first_tables(), &second = second_tables();
  const AdamElement<float> a = adam_element(p);
  const int64_t begin = block * kQuantizationBlock;
  alignas(64) float m[kQuantizationBlock], v[kQuantizationBlock];
  const __m512 m_scale = _mm512_set1_ps(in.m_scales[block]), v_scale = _mm512_set1_ps(in.v_scales[block]);
  const __m512 grad_scale = _mm512_set1_ps(p.grad_scale), lr = _mm512_set1_ps(a.lr), wd = _mm512_set1_ps(a.wd);
  const __m512 b1 = _mm512_set1_ps(a.b1), b2 = _mm512_set1_ps(a.b2), one_minus_b1 = _mm512_set1_ps(1 - a.b1),
               one_minus_b2 = _mm512_set1_ps(1 - a.b2), bias1 = _mm512_set1_ps(a.bias1),
               bias2 = _mm512_set1_ps(a.bias2), eps = _mm512_set1_ps(a.eps), lr_wd = _mm512_set1_ps(a.lr * a.wd);
  const __m512i magnitude_bits = _mm512_set1_epi32(0x7fffffff);
  // The largest magnitudes as quantize_block's std::max finds them: a NaN (an overflow inside Adam) passed over,
  // since MAXPS returns its second operand where either is NaN.
  __m512 m_largest = _mm512_setzero_ps(), v_largest = _mm512_setzero_ps();
  for (int64_t k = 0; k < count; k += 16) {
    const __m512i m_codes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in.m_codes + begin + k)));
    const __m512i v_codes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in.v_codes + begin + k)));
    __m512 mk = _mm512_mul_ps(_mm512_i32gather_ps(m_codes, first.values.data(), 4), m_scale);
    __m512 vk = _mm512_mul_ps(_mm512_i32gather_ps(v_codes, second.values.data(), 4), v_scale);
    // AdamElement<float>, operation for operation.
    __m512 param = _mm512_loadu_ps(master_in + k);
    __m512 g = _mm512_mul_ps(_mm512_loadu_ps(grad + k), grad_scale);
    if (!a.decoupled) g = _mm512_add_ps(g, _mm512_mul_ps(wd, param));
    mk = _mm512_add_ps(_mm512_mul_ps(b1, mk), _mm512_mul_ps(one_minus_b1, g));
    vk = _mm512_add_ps(_mm512_mul_ps(b2, vk), _mm512_mul_ps(_mm512_mul_ps(one_minus_b2, g), g));
    if (a.decoupled) param = _mm512_sub_ps(param, _mm512_mul_ps(lr_wd, param));
    const __m512 denominator = _mm512_add_ps(_mm512_sqrt_ps(_mm512_div_ps(vk, bias2)), eps);
    param = _mm512_sub_ps(param, _mm512_div_ps(_mm512_mul_ps(lr, _mm512_div_ps(mk, bias1)), denominator));
    _mm512_storeu_ps(master + k, param);
    _mm512_store_ps(m + k, mk);
    _mm512_store_ps(v + k, vk);
    m_largest = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(mk), magnitude_bits)), m_largest);
    v_largest = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(vk), magnitude_bits)), v_largest);
  }
  const float m_new_scale = _mm512_reduce_max_ps(m_largest), v_new_scale = _mm512_reduce_max_ps(v_largest);
  const uint64_t element = out.first_element + uint64_t(begin), stream = 2 * uint64_t(p.step);
  out.m_scales[block] = quantize(m, count, m_new_scale, first, DynamicMap::signed_map(), out.m_codes + begin,
                                 out.seed, stream, element);
  out.v_scales[block] = quantize(v, count, v_new_scale, second, DynamicMap::unsigned_map(), out.v_codes + begin,
                                 out.seed, stream + 1, element);
}

}  // namespace zb
