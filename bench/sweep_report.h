// A sweep's results read back (bench/sweep_plan.h runs the matrix): its BenchRecords grouped into panels, one per
// configuration kind (everything but the batch and sequence sizes), each a grid of batch size x sequence length
// with what every configuration came to and the largest batch that fits at each sequence length; written as one
// standalone SVG heatmap and as a console table. Reads only the records given; writes text, no files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_record.h"

namespace zb {

// What one record came to. status is the record's ("ok", "oom", "error", ...); skipped: an "oom" that was not run
// because a smaller configuration of its kind ran out (its error begins "skipped: "); tokens_per_sec only where
// it ran ok and measured a finite rate.
struct SweepCell {
  int64_t batch = 0, seq = 0;
  std::string status;
  std::optional<double> tokens_per_sec;
  bool skipped = false;
};

// One configuration kind: its records as cells. Where a combination of batch and sequence length has several
// records, the last one stands for it (in largest_fitting, the table and the heatmap).
struct SweepPanel {
  // configuration_label(stage, strategy, names_strategy = true, checkpointing), then ", <value>" for each of
  // model, dtype, optimizer, LoRA, accumulation ("accum 4") and world size ("8 GPUs") that takes more than one
  // value across all the records.
  std::string title;
  std::vector<int64_t> batches, seqs;  // ascending, the values present in the panel's records
  std::vector<SweepCell> cells;        // one per record of the kind, in record order
  // Per sequence length (ascending), the largest batch whose cell is ok (nullopt: none fits at that length). A
  // larger batch that ran ok beyond one that ran out counts: the largest ok one is reported.
  std::vector<std::pair<int64_t, std::optional<int64_t>>> largest_fitting;
};

// The panels in the order their kinds first appear in `records`.
std::vector<SweepPanel> sweep_panels(const std::vector<BenchRecord>& records);

// "fits up to batch 16 at seq 512", or "nothing fits at seq 512" without a batch.
std::string fits_line(int64_t seq, std::optional<int64_t> batch);

// One standalone SVG document ending in "</svg>\n": a heatmap a panel, stacked vertically, columns the batch sizes
// and rows the sequence lengths (both ascending); ok cells shaded on one scale shared by every panel (tokens/s over
// the largest of all records), out-of-memory, skipped and failed cells each in their own colour, and the largest
// fitting batch of each sequence length outlined. The same records give the same bytes.
std::string sweep_heatmap_svg(const std::vector<BenchRecord>& records, const std::string& title);

// The console form: per panel its title, a grid (a row a sequence length, a column a batch size, right-aligned)
// of tokens/s as a whole number with thousands separators ("12,345"), or "oom", "skip", "error" (a record's other
// status as given), "-" where there is no record; then a fits_line per sequence length. Panels are separated by
// a blank line; no records give "".
std::string sweep_table(const std::vector<BenchRecord>& records);

}  // namespace zb
