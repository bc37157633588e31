// A sweep's report (bench/sweep_report.h): records grouped into panels by kind, titles that name only what varies,
// the largest batch that fits at each sequence length, the console table's cells and lines, and the heatmap read
// back as text: well formed, escaped, deterministic, one outline per sequence length that fits.
#include "bench/sweep_report.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

namespace zb {
namespace {

BenchRecord record(int64_t batch, int64_t seq, const std::string& status, double tokens_per_sec = 0) {
  BenchRecord r;
  r.model = "gpt2";
  r.dtype = "bf16";
  r.stage = 2;
  r.batch_size = batch;
  r.seq_length = seq;
  r.status = status;
  if (status == "ok") r.throughput_tokens_per_sec = tokens_per_sec;
  if (status == "oom") r.error = "CUDA out of memory";
  if (status == "error") r.error = "NCCL timeout";
  return r;
}

BenchRecord skipped(int64_t batch, int64_t seq, const std::string& cause) {
  BenchRecord r = record(batch, seq, "oom");
  r.error = "skipped: " + cause + " ran out";
  return r;
}

BenchRecord with_stage(BenchRecord r, int stage) {
  r.stage = stage;
  return r;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

size_t count_matches(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return size_t(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

// One kind: at 512 batch 4 ran out but 8 ran (the larger ok one counts), at 1024 nothing fits, and 2048 has an
// error and combinations with no record.
std::vector<BenchRecord> one_kind() {
  return {record(1, 512, "ok", 1234.4), record(2, 512, "ok", 12345.6), record(4, 512, "oom"),
          record(8, 512, "ok", 20000),  record(1, 1024, "oom"),        skipped(2, 1024, "batch 1 at seq 1024"),
          record(1, 2048, "error")};
}

TEST(SweepPanels, GroupByKindInFirstAppearanceOrderWithSizesAscending) {
  const std::vector<BenchRecord> records = {with_stage(record(4, 1024, "ok", 10), 3), record(2, 512, "ok", 20),
                                            with_stage(record(1, 512, "oom"), 3), record(8, 256, "oom")};
  const std::vector<SweepPanel> panels = sweep_panels(records);
  ASSERT_EQ(panels.size(), 2u);
  EXPECT_EQ(panels[0].title, "none (stage 3)");
  EXPECT_EQ(panels[1].title, "none (stage 2)");
  // Cells in record order; the axes ascending, whatever the order of the records.
  ASSERT_EQ(panels[0].cells.size(), 2u);
  EXPECT_EQ(panels[0].cells[0].batch, 4);
  EXPECT_EQ(panels[0].cells[1].batch, 1);
  EXPECT_EQ(panels[0].batches, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(panels[0].seqs, (std::vector<int64_t>{512, 1024}));
  ASSERT_EQ(panels[1].cells.size(), 2u);
  EXPECT_EQ(panels[1].cells[0].seq, 512);
  EXPECT_EQ(panels[1].cells[1].seq, 256);
  EXPECT_EQ(panels[1].batches, (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(panels[1].seqs, (std::vector<int64_t>{256, 512}));
  EXPECT_EQ(panels[1].cells[0].tokens_per_sec, 20.0);
  EXPECT_FALSE(panels[1].cells[1].tokens_per_sec);
}

TEST(SweepPanels, EveryFieldButTheSizesMakesAKind) {
  std::vector<BenchRecord> records;
  const auto vary = [&](auto change) {
    BenchRecord r = record(1, 512, "ok", 1);
    change(r);
    records.push_back(r);
  };
  vary([](BenchRecord&) {});
  vary([](BenchRecord& r) { r.model = "llama"; });
  vary([](BenchRecord& r) { r.dtype = "fp32"; });
  vary([](BenchRecord& r) { r.optimizer = "sgd"; });
  vary([](BenchRecord& r) { r.lora = "rank 16, alpha 32, attention"; });
  vary([](BenchRecord& r) { r.stage = 3; });
  vary([](BenchRecord& r) { r.strategy = "cpu_optimizer"; });
  vary([](BenchRecord& r) { r.activation_checkpointing = "full"; });
  vary([](BenchRecord& r) { r.grad_accum = 4; });
  vary([](BenchRecord& r) { r.world_size = 8; });
  vary([](BenchRecord& r) { r.batch_size = 2; });  // the same kind as the first
  vary([](BenchRecord& r) { r.seq_length = 1024; });
  const std::vector<SweepPanel> panels = sweep_panels(records);
  ASSERT_EQ(panels.size(), 10u);
  EXPECT_EQ(panels[0].cells.size(), 3u);
}

TEST(SweepPanels, TitlesNameOnlyTheFieldsThatVary) {
  // Only batch and sequence vary: the label alone, which names the strategy even when it is none.
  EXPECT_EQ(sweep_panels(one_kind())[0].title, "none (stage 2)");

  std::vector<BenchRecord> records;
  BenchRecord a = record(1, 512, "ok", 1);
  a.strategy = "cpu_optimizer";
  a.activation_checkpointing = "full";
  a.world_size = 2;
  records.push_back(a);
  BenchRecord b = a;
  b.model = "llama";
  b.grad_accum = 4;
  records.push_back(b);
  BenchRecord c = a;
  c.lora = "rank 16, alpha 32, attention";
  c.world_size = 1;
  records.push_back(c);
  const std::vector<SweepPanel> panels = sweep_panels(records);
  ASSERT_EQ(panels.size(), 3u);
  // dtype and optimizer are the same everywhere: not named.
  EXPECT_EQ(panels[0].title, "cpu_optimizer (stage 2), full ckpt, gpt2, no LoRA, accum 1, 2 GPUs");
  EXPECT_EQ(panels[1].title, "cpu_optimizer (stage 2), full ckpt, llama, no LoRA, accum 4, 2 GPUs");
  EXPECT_EQ(panels[2].title,
            "cpu_optimizer (stage 2), full ckpt, gpt2, LoRA rank 16, alpha 32, attention, accum 1, 1 GPU");
}

TEST(SweepPanels, LargestFittingBatchPerSequenceLength) {
  const std::vector<SweepPanel> panels = sweep_panels(one_kind());
  ASSERT_EQ(panels.size(), 1u);
  const SweepPanel& p = panels[0];
  EXPECT_EQ(p.batches, (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(p.seqs, (std::vector<int64_t>{512, 1024, 2048}));
  using Fits = std::vector<std::pair<int64_t, std::optional<int64_t>>>;
  // Batch 8 ran ok beyond batch 4's out-of-memory: the largest ok batch counts.
  EXPECT_EQ(p.largest_fitting, (Fits{{512, 8}, {1024, std::nullopt}, {2048, std::nullopt}}));
  ASSERT_EQ(p.cells.size(), 7u);
  EXPECT_FALSE(p.cells[4].skipped);  // ran out itself
  EXPECT_EQ(p.cells[4].status, "oom");
  EXPECT_TRUE(p.cells[5].skipped);
  EXPECT_EQ(p.cells[5].status, "oom");
  EXPECT_FALSE(p.cells[6].skipped);
  EXPECT_EQ(p.cells[6].status, "error");
}

TEST(SweepPanels, ARepeatedCombinationIsTheLastRecordOfIt) {
  const std::vector<SweepPanel> panels = sweep_panels({record(4, 512, "ok", 10), record(4, 512, "oom")});
  ASSERT_EQ(panels.size(), 1u);
  EXPECT_EQ(panels[0].cells.size(), 2u);
  ASSERT_EQ(panels[0].largest_fitting.size(), 1u);
  EXPECT_FALSE(panels[0].largest_fitting[0].second);
}

TEST(SweepTable, CellsAndFitsLines) {
  std::vector<BenchRecord> records = one_kind();
  records[0].throughput_tokens_per_sec = 999.5;  // rounds to a whole 1,000
  EXPECT_EQ(sweep_table(records),
            "none (stage 2)\n"
            "seq \\ batch      1       2    4       8\n"
            "        512  1,000  12,346  oom  20,000\n"
            "       1024    oom    skip    -       -\n"
            "       2048  error       -    -       -\n"
            "fits up to batch 8 at seq 512\n"
            "nothing fits at seq 1024\n"
            "nothing fits at seq 2048\n");
  EXPECT_EQ(fits_line(512, 16), "fits up to batch 16 at seq 512");
  EXPECT_EQ(fits_line(4096, std::nullopt), "nothing fits at seq 4096");
}

TEST(SweepTable, PanelsInOrderSeparatedByABlankLine) {
  const std::vector<BenchRecord> records = {record(1, 128, "ok", 1234567.8), with_stage(record(2, 128, "oom"), 3)};
  EXPECT_EQ(sweep_table(records),
            "none (stage 2)\n"
            "seq \\ batch          1\n"
            "        128  1,234,568\n"
            "fits up to batch 1 at seq 128\n"
            "\n"
            "none (stage 3)\n"
            "seq \\ batch    2\n"
            "        128  oom\n"
            "nothing fits at seq 128\n");
  EXPECT_EQ(sweep_table({}), "");
}

TEST(SweepHeatmap, WellFormedWithEveryKindOfCell) {
  const std::string svg = sweep_heatmap_svg(one_kind(), "gpt2 sweep");
  ASSERT_TRUE(svg.rfind("<svg", 0) == 0 || svg.rfind("<?xml", 0) == 0) << svg.substr(0, 80);
  ASSERT_GE(svg.size(), 7u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(count(svg, "<svg"), 1u);
  EXPECT_EQ(count(svg, "<text"), count(svg, "</text>"));
  EXPECT_EQ(count(svg, "<g"), count(svg, "</g>"));
  // One drawn cell a record, each saying what it came to.
  EXPECT_EQ(count_matches(svg, R"(<text class="value oom"[^>]*>OOM</text>)"), 2u);
  EXPECT_EQ(count_matches(svg, R"(<text class="value skip"[^>]*>skip</text>)"), 1u);
  EXPECT_EQ(count_matches(svg, R"(<text class="value error"[^>]*>error</text>)"), 1u);
  EXPECT_EQ(count_matches(svg, R"(<text class="value ok"[^>]*>12\.3k</text>)"), 1u);
  EXPECT_EQ(count_matches(svg, R"(<text class="value ok"[^>]*>1\.2k</text>)"), 1u);
  EXPECT_EQ(count_matches(svg, R"(<text class="value ok"[^>]*>20\.0k</text>)"), 1u);
  EXPECT_EQ(count(svg, "<rect class=\"cell "), 7u);
  // A frame for every combination of the grid, the blank ones included.
  EXPECT_EQ(count(svg, "<rect class=\"cell-frame\""), 4u * 3u);
  EXPECT_NE(svg.find("batch size per GPU"), std::string::npos);
  EXPECT_NE(svg.find("sequence length"), std::string::npos);
  EXPECT_NE(svg.find("largest batch that fits"), std::string::npos);
}

TEST(SweepHeatmap, OneOutlinePerSequenceLengthThatFits) {
  std::vector<BenchRecord> records = one_kind();
  records.push_back(record(2, 1024, "ok", 50));  // a second length that fits, in a panel of its own
  records.back().stage = 3;
  records.push_back(record(4, 1024, "ok", 60));
  records.back().stage = 3;
  const std::string svg = sweep_heatmap_svg(records, "sweep");
  // Stage 2 fits at 512 only, stage 3 at 1024.
  EXPECT_EQ(count(svg, "<rect class=\"largest-fitting\""), 2u);
  EXPECT_EQ(count_matches(svg, R"(<rect class="largest-fitting"[^>]*><title>fits up to batch 8 at seq 512</title>)"),
            1u);
  EXPECT_EQ(count_matches(svg, R"(<rect class="largest-fitting"[^>]*><title>fits up to batch 4 at seq 1024</title>)"),
            1u);
  // Nothing fits anywhere: no outline.
  EXPECT_EQ(count(sweep_heatmap_svg({record(1, 512, "oom")}, "sweep"), "<rect class=\"largest-fitting\""), 0u);
}

TEST(SweepHeatmap, OneColourScaleForEveryPanel) {
  // The same rate in two panels has the same fill; the fastest of all is the darkest.
  const std::vector<BenchRecord> records = {record(1, 512, "ok", 100), record(2, 512, "ok", 400),
                                            with_stage(record(1, 512, "ok", 100), 3)};
  const std::string svg = sweep_heatmap_svg(records, "sweep");
  const std::regex fill(R"re(<rect class="cell ok"[^>]*fill="(#[0-9a-f]{6})")re");
  std::vector<std::string> fills;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), fill); it != std::sregex_iterator(); ++it)
    fills.push_back((*it)[1]);
  ASSERT_EQ(fills.size(), 3u);
  EXPECT_EQ(fills[0], fills[2]);
  EXPECT_NE(fills[0], fills[1]);
  EXPECT_EQ(fills[1], "#08306b");
}

TEST(SweepHeatmap, EscapesTitlesAndIsDeterministic) {
  std::vector<BenchRecord> records = one_kind();
  BenchRecord other = record(1, 512, "oom");
  other.model = "my<&>model";  // the model varies: it is in the panel titles
  other.error = "out of memory: <&> \"quoted\"";
  records.push_back(other);
  const std::string title = "sweep <&> \"x\"";
  const std::string svg = sweep_heatmap_svg(records, title);
  EXPECT_EQ(svg.find("<&>"), std::string::npos);
  EXPECT_NE(svg.find("sweep &lt;&amp;&gt;"), std::string::npos);
  EXPECT_NE(svg.find("my&lt;&amp;&gt;model"), std::string::npos);
  EXPECT_EQ(svg, sweep_heatmap_svg(records, title));
  // No records: still a document.
  const std::string empty = sweep_heatmap_svg({}, "nothing");
  EXPECT_EQ(empty.rfind("<svg", 0), 0u);
  EXPECT_EQ(empty.substr(empty.size() - 7), "</svg>\n");
}

}  // namespace
}  // namespace zb
