// A Transformer on the CPU backend with every unit's weights and gradients in host vectors of T (double for
// finite differences, float as training computes): tests read and write the values by their layout's offsets.
#pragma once

#include <memory>
#include <type_traits>
#include <vector>

#include "core/tracking_allocator.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/transformer.h"
#include "support/tensor_views.h"

namespace zb::test {

template <typename T>
class HostModel {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, float>);

 public:
  // Weights as the layout initialises them under seed 11; gradients only for the trainable units.
  HostModel(const TransformerConfig& config, int64_t batch, int64_t seq,
            ActivationCheckpointing checkpointing = ActivationCheckpointing::none)
      : layout_(config),
        allocator_(std::make_unique<HostMemory>()),
        model_(layout_, backend_, allocator_, std::is_same_v<T, double> ? DType::f64 : DType::f32, batch, seq,
               checkpointing) {
    for (size_t u = 0; u < layout_.units().size(); ++u) {
      std::vector<float> initial(size_t(layout_.unit(u).numel));
      layout_.initialize(u, 11, 0, layout_.unit(u).numel, initial.data());
      params_.emplace_back(initial.begin(), initial.end());
      grads_.emplace_back(layout_.unit(u).trainable ? params_.back().size() : 0, T(0));
    }
    std::vector<Tensor> p, g;
    for (size_t u = 0; u < params_.size(); ++u) {
      p.push_back(view(params_[u], Shape{int64_t(params_[u].size())}));
      g.push_back(grads_[u].empty() ? Tensor{} : view(grads_[u], Shape{int64_t(grads_[u].size())}));
    }
    model_.bind_parameters(bind_model_tensors(layout_, p));
    model_.bind_gradients(bind_model_tensors(layout_, g));
  }

  const ParameterLayout& layout() const { return layout_; }
  std::vector<T>& params(size_t unit) { return params_[unit]; }
  std::vector<T>& grads(size_t unit) { return grads_[unit]; }

  Transformer& transformer() { return model_; }
  double loss(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
    return model_.forward(view(tokens), view(targets));
  }
  double loss_and_gradients(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
    for (auto& g : grads_) std::fill(g.begin(), g.end(), T(0));
    return model_.forward_backward(view(tokens), view(targets));
  }

 private:
  ParameterLayout layout_;
  CpuBackend backend_;
  TrackingAllocator allocator_;
  Transformer model_;
  std::vector<std::vector<T>> params_, grads_;
};

}  // namespace zb::test
