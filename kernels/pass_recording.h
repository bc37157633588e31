// Whether the GPU backend may record a training pass and replay it (Backend::can_record): `graphs`, the
// trainer records each kind of micro-batch pass once as a CUDA graph and replays it, where the pass neither
// communicates nor waits for the host (engine/pass_replay.h); `eager`, every launch is issued at every pass.
// The environment variable ZB_PASS_RECORDING picks; graphs by default. The same kernels in the same order
// either way. docs/PERFORMANCE.md has what each measured.
#pragma once

namespace zb {

enum class PassRecording { graphs, eager };

// ZB_PASS_RECORDING's value, or graphs when it is unset or empty; UsageError naming the variable otherwise.
PassRecording pass_recording_from_environment();

}  // namespace zb
