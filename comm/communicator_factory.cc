#include "comm/communicator_factory.h"

#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"

namespace zb {

std::unique_ptr<Communicator> make_communicator(MpiWorld& world, Device device, void* compute_stream) {
  if (device.is_cuda()) return std::make_unique<NcclCommunicator>(world, device.index, compute_stream);
  return std::make_unique<MpiCommunicator>(world);
}

}  // namespace zb
