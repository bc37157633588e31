#include "kernels/pass_recording.h"

#include "kernels/environment_choice.h"

namespace zb {

PassRecording pass_recording_from_environment() {
  return choice_from_environment<PassRecording>("ZB_PASS_RECORDING",
                                                {{"graphs", PassRecording::graphs}, {"eager", PassRecording::eager}});
}

}  // namespace zb
