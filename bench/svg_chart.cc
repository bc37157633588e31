// The comparison chart as SVG text: layout (sizes follow the number of bars and the label lengths, estimated
// from character counts since no font metrics are at hand) and tick labels; escaping, number formatting and axis
// steps are bench/svg_document.h's.
#include "bench/svg_chart.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "bench/svg_document.h"

namespace zb {
namespace {

// Far above any measured rate or memory; keeps the axis arithmetic away from overflow for absurd inputs.
constexpr double kMaxValue = 1e15;

constexpr const char* kBarColour = "#4c78a8";
constexpr const char* kBestColour = "#f58518";
constexpr const char* kFailColour = "#c0392b";
constexpr const char* kCapacityColour = "#d62728";

// Layout, in pixels.
constexpr double kOuterPad = 16;
constexpr double kLeftMargin = 78;  // y axis title and tick labels
constexpr double kRightMargin = 24;
constexpr double kSlotWidth = 64;  // per configuration: wide enough for "1.02M" and "stage 2" side by side
constexpr double kMaxSlotWidth = 110;
constexpr double kMaxUprightPlotWidth = 480;
constexpr double kMinPlotWidth = 240;
constexpr double kMaxBarWidth = 56;
constexpr double kTitleY = 30;
constexpr double kLegendY = 56;
constexpr double kHeadingY = 92;
constexpr double kPlotTop = 112;  // leaves room for the value printed above the tallest bar
constexpr double kPlotHeight = 260;
constexpr double kTitleFont = 18;
constexpr double kLabelFont = 12;
constexpr double kRotatedLabelFont = 11;
constexpr double kLabelAngle = 40;          // degrees, when the labels do not fit side by side
constexpr size_t kMaxLabelCodePoints = 22;  // longer ones are cut (the full label is the tooltip)
constexpr size_t kMaxStatusCodePoints = 12;
// 4 to 6 tick values, 0 included: nice_axis needs more than 5 / 2.5 intervals.
constexpr int kMaxTickIntervals = 5;

double sanitize(double v) {
  return std::isfinite(v) && v > 0 ? std::min(v, kMaxValue) : 0.0;
}

constexpr std::array<const char*, 5> kSuffixes = {"", "K", "M", "B", "T"};

// Three significant digits with a K/M/B/T suffix: 41100 -> "41.1K", 1020000 -> "1.02M", 512 -> "512".
std::string compact(double v) {
  if (v == 0) return "0";
  size_t unit = 0;
  const auto decimals = [](double x) { return x < 10 ? 2 : x < 100 ? 1 : 0; };
  for (;;) {
    int d = decimals(v);
    const double rounded = std::round(v * std::pow(10.0, d)) / std::pow(10.0, d);
    d = decimals(rounded);                                 // 9.996 prints as "10.0", not "10.00"
    if (rounded >= 1000 && unit + 1 < kSuffixes.size()) {  // 999.6K prints as "1.00M"
      v /= 1000;
      ++unit;
      continue;
    }
    return svg_fixed(v, d) + kSuffixes[unit];
  }
}

// Memory in GB: one decimal ("43.5"), more below 1 GB so that small models do not all read "0.0".
std::string gigabytes(double v) {
  return svg_fixed(v, v == 0 || v >= 1 ? 1 : v >= 0.1 ? 2 : 3);
}

// The capacity as a person writes it: "80", "79.6".
std::string short_number(double v) {
  std::string s = svg_fixed(v, 1);
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

// Tick labels with as many decimals as the step needs, in the unit of the axis top for throughput ("7.5K"), so that
// every label on one axis uses the same suffix.
std::string tick_label(const NiceAxis& axis, int tick, bool compact_units) {
  if (tick == 0) return "0";
  int unit = 0;
  if (compact_units)
    while (std::pow(1000.0, unit + 1) <= axis.top() && unit + 1 < int(kSuffixes.size())) ++unit;
  return svg_fixed(tick * axis.step() / std::pow(1000.0, unit), axis.decimals(3 * unit)) + kSuffixes[unit];
}

// Where everything goes, decided before anything is written: the panels must agree on the label space.
struct Layout {
  size_t n = 0;
  double slot = 0;
  double plot_width = 0;
  double panel_width = 0;
  double left = 0;  // x of the first panel
  double width = 0;
  double height = 0;
  double axis_y = kPlotTop + kPlotHeight;
  bool rotate = false;
  double label_font = kLabelFont;
  double bar_width() const { return std::min(kMaxBarWidth, slot * 0.6); }
  double panel_x(int panel) const { return left + panel * panel_width; }
  double plot_left(int panel) const { return panel_x(panel) + kLeftMargin; }
  double bar_center(int panel, size_t i) const { return plot_left(panel) + (double(i) + 0.5) * slot; }
};

struct Config {
  std::string label;  // shortened, not escaped
  std::string full_label;
  bool ok = false;
  std::string status_text;  // what stands in for the bar of a failed one
  double tokens_per_second = 0;
  double stddev = 0;
  double gpu_peak_gb = 0;
};

struct Panel {
  const char* kind;  // the class that tells the panels apart: "throughput" or "memory"
  const char* heading;
  const char* axis_title;
  const char* unit;  // in the tooltips
  bool compact_units;
  std::vector<double> values, stddevs;
  double capacity = 0;
};

void render_panel(std::string& out, const Layout& layout, int index, const Panel& panel,
                  const std::vector<Config>& configs, int best) {
  const double x0 = layout.panel_x(index);
  const double left = layout.plot_left(index);
  const double right = left + layout.plot_width;
  const double bottom = layout.axis_y;

  double max_value = panel.capacity;
  for (size_t i = 0; i < configs.size(); ++i)
    if (configs[i].ok) max_value = std::max(max_value, panel.values[i] + panel.stddevs[i]);
  const NiceAxis axis = nice_axis(max_value, kMaxTickIntervals);
  const auto y_of = [&](double v) { return bottom - std::min(v / axis.top(), 1.0) * kPlotHeight; };

  out += "<g class=\"panel " + std::string(panel.kind) + "\">\n";
  append_svg_text(out, "heading", left, kHeadingY, panel.heading, "font-size=\"14\" font-weight=\"bold\"");
  const double title_x = x0 + 18, title_y = kPlotTop + kPlotHeight / 2;
  append_svg_text(
      out, "axis-title", title_x, title_y, panel.axis_title,
      "text-anchor=\"middle\" transform=\"rotate(-90 " + svg_coord(title_x) + " " + svg_coord(title_y) + ")\"");

  for (int t = 0; t <= axis.intervals; ++t) {
    const double y = y_of(t * axis.step());
    if (t > 0) append_svg_line(out, std::string("grid ") + panel.kind, left, y, right, y, "#e3e3e3");
    append_svg_text(out, std::string("tick ") + panel.kind, left - 6, y + 4, tick_label(axis, t, panel.compact_units),
                    "text-anchor=\"end\" font-size=\"11\" fill=\"#555\"");
  }
  append_svg_line(out, "axis", left, bottom, right, bottom, "#333");
  append_svg_line(out, "axis", left, kPlotTop, left, bottom, "#333");

  for (size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    const double cx = layout.bar_center(index, i);
    if (!c.ok) {
      append_svg_text(out, "status", cx, bottom - 8, escape_xml(c.status_text),
                      std::string("text-anchor=\"middle\" font-weight=\"bold\" fill=\"") + kFailColour + "\"");
      continue;
    }
    const double v = panel.values[i], sd = panel.stddevs[i];
    const double top = y_of(v);
    const bool is_best = int(i) == best;
    const std::string value = panel.compact_units ? compact(v) : gigabytes(v);
    std::string tooltip = escape_xml(c.full_label) + ": " + (panel.compact_units ? svg_fixed(v, 0) : svg_fixed(v, 2));
    if (sd > 0) tooltip += " \u00b1 " + (panel.compact_units ? svg_fixed(sd, 0) : svg_fixed(sd, 2));
    tooltip += std::string(" ") + panel.unit;
    out += "<rect class=\"bar " + std::string(panel.kind) + (is_best ? " best" : "") + "\" x=\"" +
           svg_coord(cx - layout.bar_width() / 2) + "\" y=\"" + svg_coord(top) + "\" width=\"" +
           svg_coord(layout.bar_width()) + "\" height=\"" + svg_coord(bottom - top) + "\" fill=\"" +
           (is_best ? kBestColour : kBarColour) + "\"><title>" + tooltip + "</title></rect>\n";
    double value_y = top;
    if (sd > 0) {
      const double hi = y_of(v + sd), lo = y_of(std::max(0.0, v - sd)), cap = std::min(10.0, layout.bar_width() / 3);
      append_svg_line(out, "errorbar", cx, hi, cx, lo, "#333");
      append_svg_line(out, "errorbar", cx - cap / 2, hi, cx + cap / 2, hi, "#333");
      append_svg_line(out, "errorbar", cx - cap / 2, lo, cx + cap / 2, lo, "#333");
      value_y = hi;
    }
    append_svg_text(out, std::string("value ") + panel.kind, cx, value_y - 5, value,
                    "text-anchor=\"middle\" font-size=\"11\"");
  }

  if (panel.capacity > 0) {
    const double y = y_of(panel.capacity);
    append_svg_line(out, "capacity", left, y, right, y, kCapacityColour,
                    "stroke-width=\"1.5\" stroke-dasharray=\"6 4\"");
    // A white halo keeps the label readable where it crosses a bar.
    append_svg_text(out, "capacity-label", right - 2, y - 5, "GPU memory " + short_number(panel.capacity) + " GB",
                    std::string("text-anchor=\"end\" font-size=\"11\" fill=\"") + kCapacityColour +
                        "\" stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\"");
  }

  for (size_t i = 0; i < configs.size(); ++i) {
    const double cx = layout.bar_center(index, i);
    const std::string label = escape_xml(configs[i].label);
    // The full label as a tooltip where it had to be cut.
    if (configs[i].label != configs[i].full_label) out += "<g><title>" + escape_xml(configs[i].full_label) + "</title>";
    if (layout.rotate) {
      const double y = bottom + 14;
      append_svg_text(out, "label", cx, y, label,
                      "text-anchor=\"end\" font-size=\"" + svg_coord(layout.label_font) + "\" transform=\"rotate(-" +
                          svg_coord(kLabelAngle) + " " + svg_coord(cx) + " " + svg_coord(y) + ")\"");
    } else {
      append_svg_text(out, "label", cx, bottom + 18, label, "text-anchor=\"middle\"");
    }
    if (configs[i].label != configs[i].full_label) out += "</g>\n";
  }
  out += "</g>\n";
}

constexpr const char* kNoneSucceeded = "no configuration succeeded";

}  // namespace

std::string render_comparison_chart(const std::string& title, const std::vector<ChartBar>& bars,
                                    double gpu_capacity_gb, bool on_gpu) {
  const double capacity = sanitize(gpu_capacity_gb);
  const double title_width = estimated_text_width(title, kTitleFont) + 2 * kOuterPad;
  if (bars.empty()) {
    const double width = std::max(480.0, title_width);
    std::string out = open_svg_document(width, 100, title);
    append_svg_title(out, kOuterPad, kTitleY, kTitleFont, title);
    append_svg_text(out, "message", kOuterPad, kLegendY + 10, kNoneSucceeded,
                    std::string("font-size=\"14\" fill=\"") + kFailColour + "\"");
    return out + "</svg>\n";
  }

  std::vector<Config> configs;
  int best = -1;
  for (const ChartBar& bar : bars) {
    Config c;
    c.full_label = bar.label;
    c.label = shorten_text(bar.label, kMaxLabelCodePoints);
    c.ok = bar.status == "ok";
    c.status_text = bar.status == "oom"  ? "OOM"
                    : bar.status.empty() ? "failed"
                                         : shorten_text(bar.status, kMaxStatusCodePoints);
    c.tokens_per_second = sanitize(bar.tokens_per_second);
    c.stddev = sanitize(bar.tokens_per_second_stddev);
    c.gpu_peak_gb = sanitize(bar.gpu_peak_gb);
    // Strictly higher: the first of equals is the recommended one. A rate of 0 recommends nothing.
    if (c.ok && c.tokens_per_second > (best < 0 ? 0.0 : configs[best].tokens_per_second)) best = int(configs.size());
    configs.push_back(std::move(c));
  }
  const bool any_ok = std::any_of(configs.begin(), configs.end(), [](const Config& c) { return c.ok; });
  const bool any_stddev =
      std::any_of(configs.begin(), configs.end(), [](const Config& c) { return c.ok && c.stddev > 0; });

  Layout layout;
  layout.n = configs.size();
  double widest_label = 0;
  for (const Config& c : configs) widest_label = std::max(widest_label, estimated_text_width(c.label, kLabelFont));
  // Wider slots keep a few longer labels ("cpu_optimizer") upright; where that would take too much width, the
  // labels are rotated instead.
  const double upright_slot = std::max(kSlotWidth, widest_label + 12);
  const double slot = upright_slot <= std::min(kMaxSlotWidth, kMaxUprightPlotWidth / double(configs.size()))
                          ? upright_slot
                          : kSlotWidth;
  layout.plot_width = std::max(kMinPlotWidth, double(layout.n) * slot);
  layout.slot = layout.plot_width / double(layout.n);
  layout.rotate = widest_label > layout.slot - 6;
  double label_depth = 18 + 4;  // one line of labels under the axis
  double left_overhang = 0;     // how far the first rotated label reaches left of its bar
  if (layout.rotate) {
    layout.label_font = kRotatedLabelFont;
    const double w = widest_label * kRotatedLabelFont / kLabelFont;
    const double angle = kLabelAngle * 3.14159265358979 / 180;
    label_depth = 14 + w * std::sin(angle) + layout.label_font;
    left_overhang = w * std::cos(angle);
  }
  layout.panel_width = kLeftMargin + layout.plot_width + kRightMargin;
  layout.left = std::max(kOuterPad, left_overhang - kLeftMargin - layout.slot / 2 + 4);
  layout.height = layout.axis_y + label_depth + kOuterPad;

  // The legend: what the highlight means, what the error bars are, or that nothing ran.
  std::string legend;
  double legend_width = 0;
  double legend_x = kOuterPad;
  if (!any_ok) {
    append_svg_text(legend, "message", legend_x, kLegendY + 4, kNoneSucceeded,
                    std::string("font-size=\"14\" fill=\"") + kFailColour + "\"");
    legend_width = estimated_text_width(kNoneSucceeded, 14);
  } else {
    if (best >= 0) {
      legend += "<rect class=\"swatch best\" x=\"" + svg_coord(legend_x) + "\" y=\"" + svg_coord(kLegendY - 9) +
                "\" width=\"12\" height=\"12\" fill=\"" + kBestColour + "\"/>\n";
      const std::string caption =
          "recommended: " + shorten_text(configs[best].full_label, 2 * kMaxLabelCodePoints) + " (highest throughput)";
      append_svg_text(legend, "legend", legend_x + 18, kLegendY + 1, escape_xml(caption));
      legend_x += 18 + estimated_text_width(caption, 12) + 24;
    }
    if (any_stddev) {
      const std::string caption = "error bars: \u00b11 standard deviation over repeats";
      append_svg_line(legend, "legend-errorbar", legend_x + 6, kLegendY - 9, legend_x + 6, kLegendY + 3, "#333");
      append_svg_line(legend, "legend-errorbar", legend_x + 2, kLegendY - 9, legend_x + 10, kLegendY - 9, "#333");
      append_svg_line(legend, "legend-errorbar", legend_x + 2, kLegendY + 3, legend_x + 10, kLegendY + 3, "#333");
      append_svg_text(legend, "legend", legend_x + 18, kLegendY + 1, escape_xml(caption));
      legend_x += 18 + estimated_text_width(caption, 12) + 24;
    }
    legend_width = legend_x - kOuterPad;
  }
  layout.width =
      std::max({layout.left + 2 * layout.panel_width + kOuterPad, title_width, legend_width + 2 * kOuterPad});

  std::string out = open_svg_document(layout.width, layout.height, title);
  append_svg_title(out, kOuterPad, kTitleY, kTitleFont, title);
  out += legend;

  Panel throughput{"throughput", "Throughput", on_gpu ? "tokens/s (all GPUs)" : "tokens/s (all ranks)", "tokens/s",
                   true, {}, {}, 0};
  Panel memory{"memory", on_gpu ? "GPU peak memory" : "device peak memory", on_gpu ? "GB per GPU" : "GB per rank",
               "GB", false, {}, {}, capacity};
  for (const Config& c : configs) {
    throughput.values.push_back(c.tokens_per_second);
    throughput.stddevs.push_back(c.stddev);
    memory.values.push_back(c.gpu_peak_gb);
    memory.stddevs.push_back(0);
  }
  render_panel(out, layout, 0, throughput, configs, best);
  render_panel(out, layout, 1, memory, configs, best);
  return out + "</svg>\n";
}

}  // namespace zb
