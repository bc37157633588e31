#include "kernels/device_activity.h"

namespace zb {

std::unique_ptr<DeviceActivity> make_device_activity(const Device& device) {
#if defined(ZB_WITH_CUPTI)
  if (device.is_cuda()) return make_cupti_activity(device.index);
#else
  (void)device;
#endif
  return nullptr;
}

}  // namespace zb
