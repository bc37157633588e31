// A device's record of its own work while a trace window is open: the kernels, copies and memsets it ran, as
// slices on the tracer's clock (core/trace.h), each tied to the host scope that launched it. The host's
// slices say when work was queued; these say when the device ran it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/trace.h"

namespace zb {

// One source records at a time in a process (the device's profiling interface is process-wide): a second
// start() while another source records throws.
class DeviceActivity {
 public:
  virtual ~DeviceActivity() = default;
  // Begins recording the device's work (kernels, copies, memsets) and installs the Tracer's launch hooks.
  // Call it where no launching scope (op, collective) is open on any thread: a scope that opened before
  // start() does not tag its work.
  virtual void start() = 0;
  // Ends recording: the caller has synchronised the device (all recorded work finished) and no launching scope
  // is open. Appends the work as slices to `out`: device lanes (TraceLane{true, stream id}), start and end on
  // trace_clock_ns(), launched_by = the id of the TraceScope open on the launching thread (0 where none).
  // Kernels are TraceCategory::kernel (NCCL's, named "nccl...", TraceCategory::collective) with detail
  // "grid [x,y,z] block [x,y,z]" and their demangled names; memcpys are TraceCategory::copy with their bytes
  // and the direction as detail ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", with "pinned" or "pageable" for the
  // host side where known); memsets are TraceCategory::copy with their bytes and detail "memset". Removes the
  // launch hooks.
  virtual void stop(std::vector<TraceSlice>& out) = 0;
  // Names a stream of this device for the trace's lanes ("compute", "communication", "copies"): `stream` is a
  // cudaStream_t as void*.
  virtual void name_stream(void* stream, const std::string& name) = 0;
  // The lanes' names by stream id: those named, and "stream N" for every other stream that ran recorded work.
  virtual std::map<uint32_t, std::string> stream_names() const = 0;
};

// The device's activity source: CUPTI's for a CUDA device in a build with CUPTI, else nullptr (the CPU backend,
// or a build without CUPTI: then a profile has the host's slices only). Throws Error, saying why, where CUPTI
// cannot record in this process (another profiler holds it, or the driver refuses): the caller decides whether
// a profile without the device's work is worth taking.
std::unique_ptr<DeviceActivity> make_device_activity(const Device& device);

// CUPTI's source for CUDA device `ordinal` (kernels/cuda/cupti_activity.cc, in builds with CUPTI only).
std::unique_ptr<DeviceActivity> make_cupti_activity(int ordinal);

}  // namespace zb
