// libkernel_timeline.so: a CUDA injection library that writes every kernel, memset and copy a program runs on
// the device, with its start and end on the device's clock, one line each, for scripts/kernel_timeline.py to
// read (where a step's time goes between kernels: the gaps no per-op benchmark sees). CUPTI's activity API
// does the recording; the CUDA driver loads the library named by CUDA_INJECTION64_PATH at the program's first
// CUDA call:
//   CUDA_INJECTION64_PATH=build-gpu/lib/libkernel_timeline.so KERNEL_TIMELINE=out.txt build-gpu/bin/train ...
// Lines: "K start end stream grid block name", "S start end stream bytes 0 memset", "C start end stream bytes
// kind memcpy" (times in ns).
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

FILE* out = nullptr;
std::mutex out_mutex;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = size_t(32) << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

// The buffers are not freed: CUPTI may hand one back again while the process ends, and they die with it.
void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(out_mutex);
  CUpti_Activity* record = nullptr;
  while (out && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      std::fprintf(out, "K %llu %llu %u %u %u %s\n", (unsigned long long)k->start, (unsigned long long)k->end,
                   k->streamId, k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ,
                   k->name ? k->name : "?");
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      std::fprintf(out, "S %llu %llu %u %llu 0 memset\n", (unsigned long long)m->start, (unsigned long long)m->end,
                   m->streamId, (unsigned long long)m->bytes);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      std::fprintf(out, "C %llu %llu %u %llu %d memcpy\n", (unsigned long long)m->start, (unsigned long long)m->end,
                   m->streamId, (unsigned long long)m->bytes, int(m->copyKind));
    }
  }
}

void flush_at_exit() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(out_mutex);
  if (out) std::fflush(out);
}

}  // namespace

extern "C" int InitializeInjection() {
  const char* path = std::getenv("KERNEL_TIMELINE");
  out = std::fopen(path ? path : "kernel_timeline.txt", "w");
  if (!out) return 0;
  cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  std::atexit(flush_at_exit);
  return 1;
}
