// The parameter of the ZeRO equivalence tests (CPU and GPU): a model, a stage and a gradient accumulation,
// the grids of them, and a GoogleTest name for each ("gpt2_tiny_stage3_accum2").
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zb::test {

struct ZeroCase {
  std::string model;
  int stage;
  int64_t grad_accum;
};

// The grids' models: gpt2-tiny and llama-tiny on every backend; on the CPU's also gemma3-tiny, whose window of 8
// bands the tests' 16 tokens (its GPU step is compared with the CPU's in cuda_training_test).
inline std::vector<std::string> grid_models() { return {"gpt2-tiny", "llama-tiny"}; }
inline std::vector<std::string> cpu_grid_models() { return {"gpt2-tiny", "llama-tiny", "gemma3-tiny"}; }

// Every model, stages 0-3, with and without gradient accumulation.
inline std::vector<ZeroCase> every_zero_case(const std::vector<std::string>& models = grid_models()) {
  std::vector<ZeroCase> cases;
  for (const std::string& model : models)
    for (int stage = 0; stage <= 3; ++stage)
      for (int64_t accum : {1, 2}) cases.push_back({model, stage, accum});
  return cases;
}

// Every stage of every model once, with accumulation in stages 1 and 3: the offload tests' grid (each case
// runs every strategy).
inline std::vector<ZeroCase> every_stage_once(const std::vector<std::string>& models = grid_models()) {
  std::vector<ZeroCase> cases;
  for (const std::string& model : models)
    for (int stage = 0; stage <= 3; ++stage) cases.push_back({model, stage, 1 + stage % 2});
  return cases;
}

inline std::string zero_case_name(const ::testing::TestParamInfo<ZeroCase>& info) {
  std::string name = info.param.model + "_stage" + std::to_string(info.param.stage) + "_accum" +
                     std::to_string(info.param.grad_accum);
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
}

}  // namespace zb::test
