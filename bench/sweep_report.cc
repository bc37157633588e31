// A sweep's results as panels, a heatmap and a table: the grouping of records by kind, the titles that name only
// what varies, and the heatmap's layout (text widths estimated from character counts, since no font metrics are
// at hand). Escaping and number formatting in the SVG are bench/svg_document.h's.
#include "bench/sweep_report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <tuple>

#include "bench/svg_document.h"
#include "core/strings.h"

namespace zb {
namespace {

constexpr const char* kSkippedPrefix = "skipped: ";

// Layout, in pixels.
constexpr double kOuterPad = 16;
constexpr double kTitleY = 30;
constexpr double kScaleLegendY = 56;
constexpr double kKindsLegendY = 80;
constexpr double kOutlineLegendY = 104;
constexpr double kPanelsTop = 124;
constexpr double kHeadingHeight = 26;  // from a panel's top to its grid
constexpr double kBelowGrid = 44;      // batch labels and the axis title under a grid
constexpr double kPanelGap = 24;
constexpr double kAxisTitleWidth = 22;  // the rotated "sequence length" left of the row labels
constexpr double kMinCellWidth = 56;    // "12.3k" and "error" with room to spare
constexpr double kCellHeight = 28;
constexpr double kOutlineWidth = 3;
constexpr double kSwatchSize = 14;
constexpr double kScaleBarWidth = 160;
constexpr double kTitleFont = 18;
constexpr double kHeadingFont = 14;
constexpr double kTextFont = 12;
constexpr double kCellFont = 11;
constexpr const char* kRowAxisTitle = "sequence length";
constexpr const char* kColumnAxisTitle = "batch size per GPU";
constexpr size_t kMaxTooltipCodePoints = 300;

constexpr const char* kMutedInk = "#555";
constexpr const char* kOomFill = "#a6a6a6";
constexpr const char* kSkipFill = "#e0e0e0";
constexpr const char* kErrorFill = "#f4c7c3";
constexpr const char* kErrorInk = "#8b1a1a";
constexpr const char* kAbsentStroke = "#e3e3e3";
// Orange rather than black: a dark outline would vanish on the darkest cells of the blue scale.
constexpr const char* kFitsStroke = "#f58518";

// The colour scale, light to dark (ColorBrewer's "Blues"), sampled linearly between stops.
constexpr std::array<std::array<double, 3>, 5> kScaleStops = {
    {{247, 251, 255}, {198, 219, 239}, {107, 174, 214}, {33, 113, 181}, {8, 48, 107}}};

// Everything but the batch and sequence sizes.
using Kind =
    std::tuple<std::string, std::string, std::string, std::string, int, std::string, std::string, int64_t, int>;

Kind kind_of(const BenchRecord& r) {
  return {r.model,      r.dtype,     r.optimizer, r.lora, r.stage, r.strategy, r.activation_checkpointing,
          r.grad_accum, r.world_size};
}

// Which of the fields a title may name take more than one value across the records.
struct Varying {
  bool model = false, dtype = false, optimizer = false, lora = false, grad_accum = false, world_size = false;
};

template <typename Field>
bool varies(const std::vector<BenchRecord>& records, Field field) {
  return std::any_of(records.begin(), records.end(),
                     [&](const BenchRecord& r) { return field(r) != field(records.front()); });
}

Varying varying_fields(const std::vector<BenchRecord>& records) {
  Varying v;
  v.model = varies(records, [](const BenchRecord& r) { return r.model; });
  v.dtype = varies(records, [](const BenchRecord& r) { return r.dtype; });
  v.optimizer = varies(records, [](const BenchRecord& r) { return r.optimizer; });
  v.lora = varies(records, [](const BenchRecord& r) { return r.lora; });
  v.grad_accum = varies(records, [](const BenchRecord& r) { return r.grad_accum; });
  v.world_size = varies(records, [](const BenchRecord& r) { return r.world_size; });
  return v;
}

std::string title_of(const BenchRecord& r, const Varying& v) {
  std::string title = configuration_label(r.stage, r.strategy, /*names_strategy=*/true, r.activation_checkpointing);
  if (v.model) title += ", " + r.model;
  if (v.dtype) title += ", " + (r.dtype.empty() ? std::string("default dtype") : r.dtype);
  if (v.optimizer) title += ", " + r.optimizer;
  // "rank 16, alpha 32, attention" alone would not say it is LoRA.
  if (v.lora) title += r.lora == "none" ? std::string(", no LoRA") : ", LoRA " + r.lora;
  if (v.grad_accum) title += cat(", accum ", r.grad_accum);
  if (v.world_size) title += cat(", ", r.world_size, r.world_size == 1 ? " GPU" : " GPUs");
  return title;
}

// The cell standing for each combination: the last record of it.
std::map<std::pair<int64_t, int64_t>, const SweepCell*> cell_grid(const SweepPanel& panel) {
  std::map<std::pair<int64_t, int64_t>, const SweepCell*> grid;  // (seq, batch)
  for (const SweepCell& c : panel.cells) grid[{c.seq, c.batch}] = &c;
  return grid;
}

std::vector<int64_t> ascending_distinct(std::vector<int64_t> values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

// The panels, and where `record_indices` is given, the index in `records` of each panel's cells.
std::vector<SweepPanel> group_panels(const std::vector<BenchRecord>& records,
                                     std::vector<std::vector<size_t>>* record_indices) {
  const Varying varying = varying_fields(records);
  std::vector<SweepPanel> panels;
  std::vector<Kind> kinds;
  for (size_t i = 0; i < records.size(); ++i) {
    const BenchRecord& r = records[i];
    const Kind kind = kind_of(r);
    size_t panel = size_t(std::find(kinds.begin(), kinds.end(), kind) - kinds.begin());
    if (panel == kinds.size()) {
      kinds.push_back(kind);
      panels.push_back(SweepPanel{});
      panels.back().title = title_of(r, varying);
      if (record_indices) record_indices->emplace_back();
    }
    SweepCell c;
    c.batch = r.batch_size;
    c.seq = r.seq_length;
    c.status = r.status;
    c.skipped = r.status == "oom" && r.error.rfind(kSkippedPrefix, 0) == 0;
    if (r.ok() && r.throughput_tokens_per_sec && std::isfinite(*r.throughput_tokens_per_sec) &&
        *r.throughput_tokens_per_sec >= 0)
      c.tokens_per_sec = r.throughput_tokens_per_sec;
    panels[panel].cells.push_back(std::move(c));
    if (record_indices) (*record_indices)[panel].push_back(i);
  }
  for (SweepPanel& p : panels) {
    std::vector<int64_t> batches, seqs;
    for (const SweepCell& c : p.cells) {
      batches.push_back(c.batch);
      seqs.push_back(c.seq);
    }
    p.batches = ascending_distinct(std::move(batches));
    p.seqs = ascending_distinct(std::move(seqs));
    std::map<int64_t, std::optional<int64_t>> largest;
    for (int64_t seq : p.seqs) largest[seq] = std::nullopt;
    for (const auto& [position, cell] : cell_grid(p)) {
      std::optional<int64_t>& fits = largest[position.first];
      if (cell->status == "ok") fits = std::max(fits.value_or(cell->batch), cell->batch);
    }
    p.largest_fitting.assign(largest.begin(), largest.end());
  }
  return panels;
}

// 12345.6 -> "12,346". Rates are never negative; the clamp keeps absurd ones within llround's range.
std::string thousands(double value) {
  const std::string digits = std::to_string(std::llround(std::clamp(value, 0.0, 1e18)));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// Short enough for a cell: "845", "12.3k", "1.2M"; one decimal below 100 of a unit, none above.
std::string compact(double value) {
  static constexpr std::array<const char*, 5> kUnits = {"", "k", "M", "G", "T"};
  if (std::llround(value) < 1000) return svg_fixed(value, 0);
  for (size_t unit = 1; unit < kUnits.size(); ++unit) {
    const double v = value / std::pow(1000.0, double(unit));
    // Decided on the rounded value: 99.96k prints as "100k", 999.6k as "1.0M".
    if (std::round(v * 10) < 1000) return svg_fixed(v, 1) + kUnits[unit];
    if (std::round(v) < 1000 || unit + 1 == kUnits.size()) return svg_fixed(v, 0) + kUnits[unit];
  }
  return svg_fixed(value, 0);
}

// What a cell says in the table.
std::string table_text(const SweepCell& c) {
  if (c.status == "ok") return c.tokens_per_sec ? thousands(*c.tokens_per_sec) : "ok";
  if (c.skipped) return "skip";
  return c.status;
}

std::string hex_colour(const std::array<double, 3>& rgb) {
  static constexpr const char* kDigits = "0123456789abcdef";
  std::string out = "#";
  for (double channel : rgb) {
    const long v = std::clamp(std::lround(channel), 0L, 255L);
    out += kDigits[v / 16];
    out += kDigits[v % 16];
  }
  return out;
}

// The scale at `fraction` (0: lightest, 1: darkest).
std::array<double, 3> scale_rgb(double fraction) {
  const double position = std::clamp(fraction, 0.0, 1.0) * double(kScaleStops.size() - 1);
  const size_t low = std::min(size_t(position), kScaleStops.size() - 2);
  const double t = position - double(low);
  std::array<double, 3> rgb{};
  for (size_t i = 0; i < 3; ++i) rgb[i] = kScaleStops[low][i] + t * (kScaleStops[low + 1][i] - kScaleStops[low][i]);
  return rgb;
}

// Dark text on light fills, white on dark ones (perceived brightness, 0-255).
const char* ink_on(const std::array<double, 3>& rgb) {
  return 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] > 140 ? "#111" : "white";
}

// A whole <rect .../>, or one holding `tooltip` (already escaped) as its <title>.
std::string rect(std::string_view cls, double x, double y, double width, double height, std::string_view fill,
                 std::string_view extra_attributes, std::string_view tooltip = "") {
  std::string out =
      cat("<rect class=\"", cls, "\" x=\"", svg_coord(x), "\" y=\"", svg_coord(y), "\" width=\"", svg_coord(width),
          "\" height=\"", svg_coord(height), "\" fill=\"", fill, "\" ", extra_attributes);
  return tooltip.empty() ? out + "/>\n" : cat(out, "><title>", tooltip, "</title></rect>\n");
}

// How a cell is drawn.
struct CellLook {
  std::string kind;  // the class beside "cell": ok, oom, skip, error
  std::string fill, ink, text;
};

CellLook look_of(const SweepCell& c, double scale_max) {
  if (c.status == "ok") {
    // An ok run without a rate is drawn at the light end: it fits, but says nothing of speed.
    const auto rgb = scale_rgb(c.tokens_per_sec && scale_max > 0 ? *c.tokens_per_sec / scale_max : 0.0);
    return {"ok", hex_colour(rgb), ink_on(rgb), c.tokens_per_sec ? compact(*c.tokens_per_sec) : "ok"};
  }
  if (c.skipped) return {"skip", kSkipFill, kMutedInk, "skip"};
  if (c.status == "oom") return {"oom", kOomFill, "#111", "OOM"};
  return {"error", kErrorFill, kErrorInk, c.status == "error" ? "error" : shorten_text(c.status, 8)};
}

std::string tooltip_of(const SweepCell& c, const BenchRecord& r) {
  std::string text = cat("batch ", c.batch, " at seq ", c.seq, ": ");
  if (c.status == "ok") {
    text += c.tokens_per_sec ? thousands(*c.tokens_per_sec) + " tokens/s" : "ok";
  } else {
    text += c.skipped ? "skipped" : c.status;
    if (!r.error.empty()) text += " (" + r.error + ")";
  }
  return escape_xml(shorten_text(text, kMaxTooltipCodePoints));
}

// A panel's place in the document.
struct PanelLayout {
  double top = 0;
  double grid_left = 0, grid_top = 0;
  double cell_width = kMinCellWidth;
  double row_title_span = 0;  // the height the row axis title is centred on, from grid_top
  double width = 0, height = 0;
};

PanelLayout layout_panel(const SweepPanel& p, double top) {
  PanelLayout l;
  l.top = top;
  double widest_row_label = 0;
  for (int64_t seq : p.seqs) widest_row_label = std::max(widest_row_label, estimated_text_width(cat(seq), kCellFont));
  l.grid_left = kOuterPad + kAxisTitleWidth + widest_row_label + 8;
  l.grid_top = top + kHeadingHeight;
  for (const SweepCell& c : p.cells) {
    const double text =
        std::max(estimated_text_width(cat(c.batch), kCellFont), estimated_text_width(look_of(c, 0).text, kCellFont));
    l.cell_width = std::max(l.cell_width, text + 12);
  }
  const double grid_width = l.cell_width * double(p.batches.size());
  const double axis_title_width = estimated_text_width(kColumnAxisTitle, kTextFont);
  l.width = std::max({l.grid_left + std::max(grid_width, axis_title_width) + kOuterPad,
                      kOuterPad + estimated_text_width(p.title, kHeadingFont) + kOuterPad});
  // The rotated row axis title is taller than a grid of few rows: it then reaches below the grid, beside the
  // column labels, and the panel grows to hold it.
  const double grid_height = kCellHeight * double(p.seqs.size());
  l.row_title_span = std::max(grid_height, estimated_text_width(kRowAxisTitle, kTextFont) + 4);
  l.height = kHeadingHeight + std::max(grid_height + kBelowGrid, l.row_title_span);
  return l;
}

void render_panel(std::string& out, const SweepPanel& p, const PanelLayout& l, const std::vector<BenchRecord>& records,
                  const std::vector<size_t>& record_of_cell, double scale_max) {
  out += "<g class=\"panel\">\n";
  append_svg_text(out, "heading", kOuterPad, l.top + 16, escape_xml(p.title),
                  "font-size=\"" + svg_coord(kHeadingFont) + "\" font-weight=\"bold\"");
  const auto column = [&](int64_t batch) {
    return double(std::lower_bound(p.batches.begin(), p.batches.end(), batch) - p.batches.begin());
  };
  const auto row = [&](int64_t seq) {
    return double(std::lower_bound(p.seqs.begin(), p.seqs.end(), seq) - p.seqs.begin());
  };
  const double grid_width = l.cell_width * double(p.batches.size());
  const double grid_bottom = l.grid_top + kCellHeight * double(p.seqs.size());

  // Every combination's outline first, so that one without a record shows as a blank cell of the grid.
  for (int64_t seq : p.seqs)
    for (int64_t batch : p.batches)
      out += rect("cell-frame", l.grid_left + column(batch) * l.cell_width, l.grid_top + row(seq) * kCellHeight,
                  l.cell_width, kCellHeight, "none", cat("stroke=\"", kAbsentStroke, "\""));

  const auto grid = cell_grid(p);
  for (const auto& [position, cell] : grid) {
    const SweepCell& c = *cell;
    const CellLook look = look_of(c, scale_max);
    const double x = l.grid_left + column(c.batch) * l.cell_width, y = l.grid_top + row(c.seq) * kCellHeight;
    const size_t index = size_t(cell - p.cells.data());
    out += rect("cell " + look.kind, x, y, l.cell_width, kCellHeight, look.fill, "stroke=\"white\"",
                tooltip_of(c, records[record_of_cell[index]]));
    append_svg_text(out, "value " + look.kind, x + l.cell_width / 2, y + kCellHeight / 2 + 4, escape_xml(look.text),
                    cat("text-anchor=\"middle\" font-size=\"", svg_coord(kCellFont), "\" fill=\"", look.ink, "\""));
  }

  // Drawn after the cells, inset by half the stroke, so that no neighbour covers it.
  for (const auto& [seq, batch] : p.largest_fitting) {
    if (!batch) continue;
    const double inset = kOutlineWidth / 2;
    out += rect("largest-fitting", l.grid_left + column(*batch) * l.cell_width + inset,
                l.grid_top + row(seq) * kCellHeight + inset, l.cell_width - kOutlineWidth, kCellHeight - kOutlineWidth,
                "none", cat("stroke=\"", kFitsStroke, "\" stroke-width=\"", svg_coord(kOutlineWidth), "\""),
                escape_xml(fits_line(seq, batch)));
  }

  for (int64_t seq : p.seqs)
    append_svg_text(out, "row-label", l.grid_left - 6, l.grid_top + row(seq) * kCellHeight + kCellHeight / 2 + 4,
                    cat(seq),
                    cat("text-anchor=\"end\" font-size=\"", svg_coord(kCellFont), "\" fill=\"", kMutedInk, "\""));
  for (int64_t batch : p.batches)
    append_svg_text(out, "column-label", l.grid_left + column(batch) * l.cell_width + l.cell_width / 2,
                    grid_bottom + 15, cat(batch),
                    cat("text-anchor=\"middle\" font-size=\"", svg_coord(kCellFont), "\" fill=\"", kMutedInk, "\""));
  append_svg_text(out, "axis-title", l.grid_left + grid_width / 2, grid_bottom + 34, kColumnAxisTitle,
                  "text-anchor=\"middle\"");
  const double title_x = kOuterPad + 12, title_y = l.grid_top + l.row_title_span / 2;
  append_svg_text(
      out, "axis-title", title_x, title_y, kRowAxisTitle,
      "text-anchor=\"middle\" transform=\"rotate(-90 " + svg_coord(title_x) + " " + svg_coord(title_y) + ")\"");
  out += "</g>\n";
}

// The legend's lines; returns their width.
double append_legend(std::string& out, std::optional<double> lowest, double highest) {
  double width = 0;
  double x = kOuterPad;
  if (lowest) {
    // The bar spans the scale from the slowest configuration's shade to the fastest's.
    const double from = highest > 0 ? *lowest / highest : 0;
    out += "<defs><linearGradient id=\"sweep-scale\" x1=\"0\" y1=\"0\" x2=\"1\" y2=\"0\">";
    for (int i = 0; i <= 4; ++i)
      out += cat("<stop offset=\"", svg_coord(i / 4.0), "\" stop-color=\"",
                 hex_colour(scale_rgb(from + (1 - from) * i / 4.0)), "\"/>");
    out += "</linearGradient></defs>\n";
    const std::string low_text = "tokens/s: " + thousands(*lowest);
    append_svg_text(out, "legend", x, kScaleLegendY, low_text);
    x += estimated_text_width(low_text, kTextFont) + 8;
    out += rect("scale", x, kScaleLegendY - 11, kScaleBarWidth, kSwatchSize, "url(#sweep-scale)", "stroke=\"#ccc\"");
    x += kScaleBarWidth + 8;
    const std::string high_text = thousands(highest) + " (darkest: the fastest of all panels)";
    append_svg_text(out, "legend", x, kScaleLegendY, high_text);
    width = x + estimated_text_width(high_text, kTextFont);
  } else {
    const std::string text = "no configuration ran";
    append_svg_text(out, "legend", x, kScaleLegendY, text, cat("fill=\"", kErrorInk, "\""));
    width = x + estimated_text_width(text, kTextFont);
  }

  struct Entry {
    const char* kind;
    const char* fill;
    const char* caption;
  };
  static constexpr std::array<Entry, 4> kEntries = {{{"oom", kOomFill, "OOM: ran out of memory"},
                                                     {"skip", kSkipFill, "skip: a smaller one of its kind ran out"},
                                                     {"error", kErrorFill, "error: failed otherwise"},
                                                     {"absent", "white", "blank: not in the sweep"}}};
  x = kOuterPad;
  for (const Entry& e : kEntries) {
    out += rect(std::string("swatch ") + e.kind, x, kKindsLegendY - 11, kSwatchSize, kSwatchSize, e.fill,
                cat("stroke=\"", std::string_view(e.kind) == "absent" ? "#ccc" : e.fill, "\""));
    append_svg_text(out, "legend", x + kSwatchSize + 6, kKindsLegendY, e.caption);
    x += kSwatchSize + 6 + estimated_text_width(e.caption, kTextFont) + 20;
  }
  width = std::max(width, x - 20);

  x = kOuterPad;
  out += rect("swatch largest-fitting", x + kOutlineWidth / 2, kOutlineLegendY - 11 + kOutlineWidth / 2,
              kSwatchSize - kOutlineWidth, kSwatchSize - kOutlineWidth, "none",
              cat("stroke=\"", kFitsStroke, "\" stroke-width=\"", svg_coord(kOutlineWidth), "\""));
  const std::string caption = "outlined: the largest batch that fits at each sequence length";
  append_svg_text(out, "legend", x + kSwatchSize + 6, kOutlineLegendY, caption);
  return std::max(width, x + kSwatchSize + 6 + estimated_text_width(caption, kTextFont));
}

}  // namespace

std::vector<SweepPanel> sweep_panels(const std::vector<BenchRecord>& records) {
  return group_panels(records, nullptr);
}

std::string fits_line(int64_t seq, std::optional<int64_t> batch) {
  return batch ? cat("fits up to batch ", *batch, " at seq ", seq) : cat("nothing fits at seq ", seq);
}

std::string sweep_heatmap_svg(const std::vector<BenchRecord>& records, const std::string& title) {
  std::vector<std::vector<size_t>> record_of_cell;  // for the tooltips' error messages
  const std::vector<SweepPanel> panels = group_panels(records, &record_of_cell);

  // One scale for every panel: the shade says the same rate wherever it appears.
  std::optional<double> lowest;
  double highest = 0;
  for (const SweepPanel& p : panels)
    for (const auto& [position, cell] : cell_grid(p))
      if (cell->status == "ok" && cell->tokens_per_sec) {
        lowest = std::min(lowest.value_or(*cell->tokens_per_sec), *cell->tokens_per_sec);
        highest = std::max(highest, *cell->tokens_per_sec);
      }

  std::string body;
  double width = append_legend(body, lowest, highest) + kOuterPad;
  double y = kPanelsTop;
  for (size_t i = 0; i < panels.size(); ++i) {
    const PanelLayout layout = layout_panel(panels[i], y);
    render_panel(body, panels[i], layout, records, record_of_cell[i], highest);
    width = std::max(width, layout.width);
    y += layout.height + kPanelGap;
  }
  width = std::max(width, kOuterPad + estimated_text_width(title, kTitleFont) + kOuterPad);
  const double height = panels.empty() ? kPanelsTop : y - kPanelGap + kOuterPad;

  std::string out = open_svg_document(width, height, title);
  append_svg_title(out, kOuterPad, kTitleY, kTitleFont, title);
  out += body;
  out += "</svg>\n";
  return out;
}

std::string sweep_table(const std::vector<BenchRecord>& records) {
  static constexpr const char* kCorner = "seq \\ batch";
  std::string out;
  for (const SweepPanel& p : sweep_panels(records)) {
    if (!out.empty()) out += "\n";
    out += p.title + "\n";
    const auto grid = cell_grid(p);
    // rows[0] is the header; column 0 the sequence lengths.
    std::vector<std::vector<std::string>> rows;
    rows.push_back({kCorner});
    for (int64_t batch : p.batches) rows[0].push_back(cat(batch));
    for (int64_t seq : p.seqs) {
      std::vector<std::string> row{cat(seq)};
      for (int64_t batch : p.batches) {
        const auto it = grid.find({seq, batch});
        row.push_back(it == grid.end() ? "-" : table_text(*it->second));
      }
      rows.push_back(std::move(row));
    }
    std::vector<size_t> widths(rows[0].size(), 0);
    for (const auto& row : rows)
      for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
    for (const auto& row : rows) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        if (i) line += "  ";
        line += std::string(widths[i] - row[i].size(), ' ') + row[i];
      }
      out += line + "\n";
    }
    for (const auto& [seq, batch] : p.largest_fitting) out += fits_line(seq, batch) + "\n";
  }
  return out;
}

}  // namespace zb
