#include "engine/zero_config.h"

#include "core/errors.h"
#include "core/strings.h"

namespace zb {

void validate(const ZeroConfig& c) {
  if (c.stage < 0 || c.stage > 3) throw UsageError(cat("--zero-stage must be 0, 1, 2 or 3, not ", c.stage));
  auto positive = [](int64_t value, const char* name) {
    if (value <= 0) throw UsageError(cat("--", name, " must be a positive number of elements, not ", value));
  };
  positive(c.reduce_bucket_size, "reduce-bucket-size");
  positive(c.allgather_bucket_size, "allgather-bucket-size");
  if (c.stage3_prefetch_bucket_size < 0)
    throw UsageError(cat("--stage3-prefetch-bucket-size must be 0 or more, not ", c.stage3_prefetch_bucket_size));
  if (c.stage3_param_persistence_threshold < 0)
    throw UsageError(cat("--stage3-param-persistence-threshold must be 0 or more, not ",
                         c.stage3_param_persistence_threshold));
}

std::string describe(const ZeroConfig& c) {
  return cat("ZeRO stage ", c.stage, " (reduce bucket ", c.reduce_bucket_size, ", allgather bucket ",
             c.allgather_bucket_size, ", overlap_comm ", c.overlaps() ? "on" : "off",
             c.stage == 3 ? cat(", prefetch ", c.stage3_prefetch_bucket_size, ", persistence threshold ",
                                c.stage3_param_persistence_threshold)
                          : std::string(),
             c.pipelined_updates ? ", pipelined updates" : "", c.check_collectives ? ", collectives checked" : "", ")");
}

}  // namespace zb
