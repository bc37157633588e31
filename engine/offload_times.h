// OffloadTimes: where an offload strategy's step spends its time, phase by phase, so that a report can say
// which phase bounds the step and how well the others hide behind it.
#pragma once

namespace zb {

struct OffloadTimes {
  double to_host_ms = 0, to_device_ms = 0;        // device time of the copies: gradients down, weights up
  double to_host_bytes = 0, to_device_bytes = 0;
  double cpu_ms = 0;                              // the CPU optimizer's arithmetic
  double nvme_read_ms = 0, nvme_write_ms = 0;     // the NVMe transfers themselves (on their own threads)
  double nvme_read_bytes = 0, nvme_write_bytes = 0;
  double read_wait_ms = 0, write_wait_ms = 0;     // the CPU optimizer waiting for NVMe
  double update_wait_ms = 0;                      // training waiting for units' updates: the exposed part
  // Speculative updates during backward: the CPU time of those kept (part of cpu_ms) and of those dropped
  // because the step clipped its gradients (not part of cpu_ms: that work is done again).
  double speculation_kept_ms = 0, speculation_discarded_ms = 0;

  OffloadTimes& operator+=(const OffloadTimes& o) {
    to_host_ms += o.to_host_ms, to_device_ms += o.to_device_ms;
    to_host_bytes += o.to_host_bytes, to_device_bytes += o.to_device_bytes;
    cpu_ms += o.cpu_ms;
    nvme_read_ms += o.nvme_read_ms, nvme_write_ms += o.nvme_write_ms;
    nvme_read_bytes += o.nvme_read_bytes, nvme_write_bytes += o.nvme_write_bytes;
    read_wait_ms += o.read_wait_ms, write_wait_ms += o.write_wait_ms;
    update_wait_ms += o.update_wait_ms;
    speculation_kept_ms += o.speculation_kept_ms, speculation_discarded_ms += o.speculation_discarded_ms;
    return *this;
  }
};

}  // namespace zb
