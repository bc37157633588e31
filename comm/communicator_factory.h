// make_communicator: the Communicator for the device the engine trains on: NCCL between GPUs, MPI between
// host processes (the CPU backend). Collective: every rank calls it, in the same order as its other
// communicator constructions.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/device.h"

namespace zb {

class MpiWorld;

// compute_stream: the cudaStream_t the engine's compute runs on (nullptr: the legacy default stream);
// ignored for the cpu device.
std::unique_ptr<Communicator> make_communicator(MpiWorld& world, Device device, void* compute_stream);

}  // namespace zb
