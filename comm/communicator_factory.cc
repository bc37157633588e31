#include "comm/communicator_factory.h"

#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"
#include "core/errors.h"

namespace zb {

std::unique_ptr<Communicator> make_communicator(MpiWorld& world, Device device, void* compute_stream) {
#ifdef ZB_WITH_CUDA
  if (device.is_cuda()) return std::make_unique<NcclCommunicator>(world, device.index, compute_stream);
#else
  (void)compute_stream;
  if (device.is_cuda()) throw Error("this build has no CUDA support: NCCL is not available");
#endif
  return std::make_unique<MpiCommunicator>(world);
}

#ifndef ZB_WITH_CUDA
std::string nccl_library_version() { return {}; }
#endif

}  // namespace zb
