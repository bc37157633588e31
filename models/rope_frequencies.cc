#include "models/rope_frequencies.h"

#include <cmath>
#include <numbers>

namespace zb {

std::vector<double> rope_inverse_frequencies(const TransformerConfig& c, bool local) {
  const int64_t half = c.head_dim / 2;
  const double theta = local ? c.local_rope_theta.value() : c.rope_theta;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = 1.0 / std::pow(theta, double(2 * i) / double(c.head_dim));
  if (local) return inv_freq;
  if (c.rope_linear_factor != 1.0) {
    for (double& f : inv_freq) f /= c.rope_linear_factor;
  }
  if (!c.rope_scaling) return inv_freq;

  // Llama 3: long wavelengths are divided by `factor`, short ones kept, the band between blended smoothly.
  const Llama3RopeScaling& s = *c.rope_scaling;
  const double old_context = double(s.original_max_position);
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f /= s.factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth = (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1.0 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv_freq;
}

}  // namespace zb
