// ParameterStore: the model's weights, gradients and optimizer state as per-unit flat buffers, all in the
// ParameterLayout's order. In fp32 training the weights are their own master copy; with a 16-bit model
// dtype the fp32 master weights are separate buffers.
#pragma once

#include <vector>

#include "core/tracking_allocator.h"
#include "kernels/backend.h"
#include "models/parameter_layout.h"

namespace zb {

class ParameterStore {
 public:
  // needs_second_moment: Adam and AdamW keep v; SGD does not.
  ParameterStore(const ParameterLayout& layout, TrackingAllocator& allocator, DType dtype, bool needs_second_moment);
  ParameterStore(const ParameterStore&) = delete;  // refers to its layout, which must outlive it
  ParameterStore& operator=(const ParameterStore&) = delete;

  // fp32 master weights are separate buffers only when the model's own dtype is 16-bit.
  static bool has_separate_master(DType dtype) { return dtype != DType::f32 && dtype != DType::f64; }
  // The dtype of the master weights and the optimizer moments: fp32 beside 16-bit weights, else the weights'.
  static DType master_dtype(DType dtype) { return has_separate_master(dtype) ? DType::f32 : dtype; }

  // Fills the weights from the layout's seeded initialisation and zeroes gradients and optimizer state.
  void initialize(Backend& backend, uint64_t seed);
  void zero_gradients(Backend& backend);

  const ParameterLayout& layout() const { return layout_; }
  DType dtype() const { return dtype_; }
  size_t unit_count() const { return params_.size(); }
  // Flat 1-D views of unit u.
  Tensor params(size_t u) const { return view(params_[u], u, dtype_); }
  Tensor grads(size_t u) const { return view(grads_[u], u, dtype_); }
  Tensor master(size_t u) const { return master_.empty() ? params(u) : view(master_[u], u, DType::f32); }
  // The model's weights when they are not the master weights themselves (16-bit training), else empty.
  Tensor model_copy(size_t u) const { return master_.empty() ? Tensor{} : params(u); }
  Tensor first_moment(size_t u) const { return view(m_[u], u, master_dtype(dtype_)); }
  Tensor second_moment(size_t u) const { return v_.empty() ? Tensor{} : view(v_[u], u, master_dtype(dtype_)); }
  std::vector<Tensor> all_params() const;
  std::vector<Tensor> all_grads() const;

 private:
  Tensor view(const Buffer& b, size_t u, DType dtype) const { return b.view(Shape{layout_.unit(u).numel}, dtype); }

  const ParameterLayout& layout_;
  DType dtype_;
  std::vector<Buffer> params_, grads_, master_, m_, v_;
};

}  // namespace zb
