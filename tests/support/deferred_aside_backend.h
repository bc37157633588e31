// DeferredAsideCpuBackend: the CPU backend with a second queue (Backend::begin_aside) whose work runs as late
// as the contract allows: an optimizer_step queued aside is held until the main sequence waits (queue_wait) for
// an event recorded after it. A schedule that reads what an aside update writes without waiting for it first
// then reads the old values, and its training differs from the reference: the CPU backend proper runs
// everything in order and would hide that.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace zb::test {

class DeferredAsideCpuBackend final : public CpuBackend {
 public:
  bool begin_aside() override {
    aside_ = true;
    return true;
  }
  void end_aside() override { aside_ = false; }

  std::unique_ptr<TimingEvent> record_event() override {
    if (!aside_) return CpuBackend::record_event();
    return std::make_unique<AsideMark>(held_.size());  // after the work queued aside so far
  }
  void queue_wait(const TimingEvent& event) override {
    if (const auto* mark = dynamic_cast<const AsideMark*>(&event)) run_until(mark->position);
  }
  double elapsed_ms(const TimingEvent& start, const TimingEvent& end) override {
    if (dynamic_cast<const AsideMark*>(&start) || dynamic_cast<const AsideMark*>(&end)) return 0;
    return CpuBackend::elapsed_ms(start, end);
  }

  void optimizer_step(Tensor& master, const Tensor& grad, Tensor& m, Tensor& v, Tensor& params_out,
                      const OptimizerParams& params) override {
    if (!aside_) {
      CpuBackend::optimizer_step(master, grad, m, v, params_out, params);
      return;
    }
    // Tensors are views: the held step updates the buffers as they are when it runs.
    held_.push_back([this, master, grad, m, v, params_out, params]() mutable {
      CpuBackend::optimizer_step(master, grad, m, v, params_out, params);
    });
  }

  // How many updates queued aside have run, of how many.
  size_t ran() const { return ran_; }
  size_t held() const { return held_.size(); }

 private:
  struct AsideMark final : TimingEvent {
    explicit AsideMark(size_t p) : position(p) {}
    size_t position;
  };
  void run_until(size_t position) {
    while (ran_ < position) held_[ran_++]();
  }

  bool aside_ = false;
  std::vector<std::function<void()>> held_;
  size_t ran_ = 0;
};

}  // namespace zb::test
