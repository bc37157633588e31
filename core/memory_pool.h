// The pools that memory is accounted in, so that reports can say where the bytes went.
#pragma once

#include <array>
#include <string_view>

namespace zb {

enum class MemoryPool { parameters, gradients, optimizer_state, activations, workspace };
inline constexpr int kMemoryPoolCount = 5;
inline constexpr std::array<MemoryPool, kMemoryPoolCount> kAllMemoryPools = {
    MemoryPool::parameters, MemoryPool::gradients, MemoryPool::optimizer_state, MemoryPool::activations,
    MemoryPool::workspace};

constexpr std::string_view memory_pool_name(MemoryPool pool) {
  switch (pool) {
    case MemoryPool::parameters: return "parameters";
    case MemoryPool::gradients: return "gradients";
    case MemoryPool::optimizer_state: return "optimizer_state";
    case MemoryPool::activations: return "activations";
    case MemoryPool::workspace: return "workspace";
  }
  return "?";
}

}  // namespace zb
