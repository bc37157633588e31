// The comparison chart as SVG text: layout (sizes follow the number of bars and the label lengths, estimated
// from character counts since no font metrics are at hand), nice axis ticks, escaping and number formatting.
#include "bench/svg_chart.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string_view>

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

double sanitize(double v) {
  return std::isfinite(v) && v > 0 ? std::min(v, kMaxValue) : 0.0;
}

std::string fixed(double v, int decimals) {
  if (v == 0) v = 0;  // -0.0 would print as "-0"
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, v);
  return buffer;
}

// A coordinate: two decimals, trailing zeros dropped to keep the document small.
std::string coord(double v) {
  std::string s = fixed(v, 2);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

// Length of the well-formed UTF-8 sequence at s[i], 0 where it is not one (an XML parser rejects the whole
// document on a malformed byte, so those are replaced rather than copied).
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range, narrower after some lead bytes
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) low = 0xA0;   // overlong
    if (c == 0xED) high = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) low = 0x90;   // overlong
    if (c == 0xF4) high = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < (k == 1 ? low : 0x80) || b > (k == 1 ? high : 0xBF)) return 0;
  }
  return n;
}

// Text content or attribute value: the XML specials escaped, and what XML 1.0 cannot hold at all (control
// characters, malformed UTF-8) replaced by '?'.
std::string escape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      out += '?';
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    const char c = s[i++];
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') ? '?' : c;
    }
  }
  return out;
}

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += std::max<size_t>(1, utf8_sequence_length(s, i))) ++n;
  return n;
}

// At most `limit` code points, cut on a character boundary, with an ellipsis where something was cut.
std::string shorten(std::string_view s, size_t limit) {
  if (code_points(s) <= limit) return std::string(s);
  size_t i = 0;
  for (size_t n = 0; n + 1 < limit; ++n) i += std::max<size_t>(1, utf8_sequence_length(s, i));
  return std::string(s.substr(0, i)) + "\u2026";
}

// A rough width: no font metrics here, and 0.6 em a character errs wide for sans-serif, which is the safe side.
double text_width(std::string_view s, double font_size) {
  return double(code_points(s)) * 0.6 * font_size;
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
    return fixed(v, d) + kSuffixes[unit];
  }
}

// Memory in GB: one decimal ("43.5"), more below 1 GB so that small models do not all read "0.0".
std::string gigabytes(double v) {
  return fixed(v, v == 0 || v >= 1 ? 1 : v >= 0.1 ? 2 : 3);
}

// The capacity as a person writes it: "80", "79.6".
std::string short_number(double v) {
  std::string s = fixed(v, 1);
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

// A y axis from 0 to intervals * step, with step one of 1, 2, 2.5, 5 x 10^exponent: the smallest such step that
// covers the maximum in at most 5 intervals. The step before it needed more than 5, and the steps grow by at most
// 2.5x, so this one needs at least 3: 4 to 6 tick values, 0 included.
struct Axis {
  double mantissa = 1;
  int exponent = 0;
  int intervals = 5;
  double step() const { return mantissa * std::pow(10.0, exponent); }
  double top() const { return intervals * step(); }
};

Axis nice_axis(double max_value) {
  if (!(max_value > 0)) max_value = 1;
  for (int exponent = int(std::floor(std::log10(max_value))) - 1;; ++exponent) {
    for (const double mantissa : {1.0, 2.0, 2.5, 5.0}) {
      const double step = mantissa * std::pow(10.0, exponent);
      // The tolerance keeps 0.3 / 0.1 = 2.9999999999999996 at 3 intervals.
      const int intervals = std::max(1, int(std::ceil(max_value / step * (1 - 1e-9))));
      if (intervals <= 5) return {mantissa, exponent, intervals};
    }
  }
}

// Tick labels with as many decimals as the step needs (2.5 needs one more than its exponent says), in the unit
// of the axis top for throughput ("7.5K"), so that every label on one axis uses the same suffix.
std::string tick_label(const Axis& axis, int tick, bool compact_units) {
  if (tick == 0) return "0";
  int unit = 0;
  if (compact_units)
    while (std::pow(1000.0, unit + 1) <= axis.top() && unit + 1 < int(kSuffixes.size())) ++unit;
  const int exponent = axis.exponent - 3 * unit;
  const int decimals = std::max(0, -exponent + (axis.mantissa == 2.5 ? 1 : 0));
  return fixed(tick * axis.step() / std::pow(1000.0, unit), decimals) + kSuffixes[unit];
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

void text(std::string& out, std::string_view cls, double x, double y, std::string_view content,
          std::string_view extra = "") {
  out += "<text class=\"";
  out += cls;
  out += "\" x=\"" + coord(x) + "\" y=\"" + coord(y) + "\"";
  if (!extra.empty()) {
    out += ' ';
    out += extra;
  }
  out += '>';
  out += content;  // already escaped
  out += "</text>\n";
}

void line(std::string& out, std::string_view cls, double x1, double y1, double x2, double y2, std::string_view stroke,
          std::string_view extra = "") {
  out += "<line class=\"";
  out += cls;
  out += "\" x1=\"" + coord(x1) + "\" y1=\"" + coord(y1) + "\" x2=\"" + coord(x2) + "\" y2=\"" + coord(y2) +
         "\" stroke=\"";
  out += stroke;
  out += '"';
  if (!extra.empty()) {
    out += ' ';
    out += extra;
  }
  out += "/>\n";
}

void render_panel(std::string& out, const Layout& layout, int index, const Panel& panel,
                  const std::vector<Config>& configs, int best) {
  const double x0 = layout.panel_x(index);
  const double left = layout.plot_left(index);
  const double right = left + layout.plot_width;
  const double bottom = layout.axis_y;

  double max_value = panel.capacity;
  for (size_t i = 0; i < configs.size(); ++i)
    if (configs[i].ok) max_value = std::max(max_value, panel.values[i] + panel.stddevs[i]);
  const Axis axis = nice_axis(max_value);
  const auto y_of = [&](double v) { return bottom - std::min(v / axis.top(), 1.0) * kPlotHeight; };

  out += "<g class=\"panel " + std::string(panel.kind) + "\">\n";
  text(out, "heading", left, kHeadingY, panel.heading, "font-size=\"14\" font-weight=\"bold\"");
  const double title_x = x0 + 18, title_y = kPlotTop + kPlotHeight / 2;
  text(out, "axis-title", title_x, title_y, panel.axis_title,
       "text-anchor=\"middle\" transform=\"rotate(-90 " + coord(title_x) + " " + coord(title_y) + ")\"");

  for (int t = 0; t <= axis.intervals; ++t) {
    const double y = y_of(t * axis.step());
    if (t > 0) line(out, std::string("grid ") + panel.kind, left, y, right, y, "#e3e3e3");
    text(out, std::string("tick ") + panel.kind, left - 6, y + 4, tick_label(axis, t, panel.compact_units),
         "text-anchor=\"end\" font-size=\"11\" fill=\"#555\"");
  }
  line(out, "axis", left, bottom, right, bottom, "#333");
  line(out, "axis", left, kPlotTop, left, bottom, "#333");

  for (size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    const double cx = layout.bar_center(index, i);
    if (!c.ok) {
      text(out, "status", cx, bottom - 8, escape(c.status_text),
           std::string("text-anchor=\"middle\" font-weight=\"bold\" fill=\"") + kFailColour + "\"");
      continue;
    }
    const double v = panel.values[i], sd = panel.stddevs[i];
    const double top = y_of(v);
    const bool is_best = int(i) == best;
    const std::string value = panel.compact_units ? compact(v) : gigabytes(v);
    std::string tooltip = escape(c.full_label) + ": " + (panel.compact_units ? fixed(v, 0) : fixed(v, 2));
    if (sd > 0) tooltip += " \u00b1 " + (panel.compact_units ? fixed(sd, 0) : fixed(sd, 2));
    tooltip += std::string(" ") + panel.unit;
    out += "<rect class=\"bar " + std::string(panel.kind) + (is_best ? " best" : "") + "\" x=\"" +
           coord(cx - layout.bar_width() / 2) + "\" y=\"" + coord(top) + "\" width=\"" + coord(layout.bar_width()) +
           "\" height=\"" + coord(bottom - top) + "\" fill=\"" + (is_best ? kBestColour : kBarColour) + "\"><title>" +
           tooltip + "</title></rect>\n";
    double value_y = top;
    if (sd > 0) {
      const double hi = y_of(v + sd), lo = y_of(std::max(0.0, v - sd)), cap = std::min(10.0, layout.bar_width() / 3);
      line(out, "errorbar", cx, hi, cx, lo, "#333");
      line(out, "errorbar", cx - cap / 2, hi, cx + cap / 2, hi, "#333");
      line(out, "errorbar", cx - cap / 2, lo, cx + cap / 2, lo, "#333");
      value_y = hi;
    }
    text(out, std::string("value ") + panel.kind, cx, value_y - 5, value, "text-anchor=\"middle\" font-size=\"11\"");
  }

  if (panel.capacity > 0) {
    const double y = y_of(panel.capacity);
    line(out, "capacity", left, y, right, y, kCapacityColour, "stroke-width=\"1.5\" stroke-dasharray=\"6 4\"");
    // A white halo keeps the label readable where it crosses a bar.
    text(out, "capacity-label", right - 2, y - 5, "GPU memory " + short_number(panel.capacity) + " GB",
         std::string("text-anchor=\"end\" font-size=\"11\" fill=\"") + kCapacityColour +
             "\" stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\"");
  }

  for (size_t i = 0; i < configs.size(); ++i) {
    const double cx = layout.bar_center(index, i);
    const std::string label = escape(configs[i].label);
    // The full label as a tooltip where it had to be cut.
    if (configs[i].label != configs[i].full_label) out += "<g><title>" + escape(configs[i].full_label) + "</title>";
    if (layout.rotate) {
      const double y = bottom + 14;
      text(out, "label", cx, y, label,
           "text-anchor=\"end\" font-size=\"" + coord(layout.label_font) + "\" transform=\"rotate(-" +
               coord(kLabelAngle) + " " + coord(cx) + " " + coord(y) + ")\"");
    } else {
      text(out, "label", cx, bottom + 18, label, "text-anchor=\"middle\"");
    }
    if (configs[i].label != configs[i].full_label) out += "</g>\n";
  }
  out += "</g>\n";
}

std::string open_document(double width, double height, const std::string& title) {
  const std::string w = coord(std::ceil(width)), h = coord(std::ceil(height));
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + w + "\" height=\"" + h + "\" viewBox=\"0 0 " + w + " " +
         h + "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n<title>" + escape(title) +
         "</title>\n<rect class=\"background\" x=\"0\" y=\"0\" width=\"" + w + "\" height=\"" + h +
         "\" fill=\"white\"/>\n";
}

constexpr const char* kNoneSucceeded = "no configuration succeeded";

}  // namespace

std::string render_comparison_chart(const std::string& title, const std::vector<ChartBar>& bars,
                                    double gpu_capacity_gb, bool on_gpu) {
  const double capacity = sanitize(gpu_capacity_gb);
  const double title_width = text_width(title, kTitleFont) + 2 * kOuterPad;
  if (bars.empty()) {
    const double width = std::max(480.0, title_width);
    std::string out = open_document(width, 100, title);
    text(out, "title", kOuterPad, kTitleY, escape(title),
         "font-size=\"" + coord(kTitleFont) + "\" font-weight=\"bold\"");
    text(out, "message", kOuterPad, kLegendY + 10, kNoneSucceeded,
         std::string("font-size=\"14\" fill=\"") + kFailColour + "\"");
    return out + "</svg>\n";
  }

  std::vector<Config> configs;
  int best = -1;
  for (const ChartBar& bar : bars) {
    Config c;
    c.full_label = bar.label;
    c.label = shorten(bar.label, kMaxLabelCodePoints);
    c.ok = bar.status == "ok";
    c.status_text = bar.status == "oom"  ? "OOM"
                    : bar.status.empty() ? "failed"
                                         : shorten(bar.status, kMaxStatusCodePoints);
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
  for (const Config& c : configs) widest_label = std::max(widest_label, text_width(c.label, kLabelFont));
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
    text(legend, "message", legend_x, kLegendY + 4, kNoneSucceeded,
         std::string("font-size=\"14\" fill=\"") + kFailColour + "\"");
    legend_width = text_width(kNoneSucceeded, 14);
  } else {
    if (best >= 0) {
      legend += "<rect class=\"swatch best\" x=\"" + coord(legend_x) + "\" y=\"" + coord(kLegendY - 9) +
                "\" width=\"12\" height=\"12\" fill=\"" + kBestColour + "\"/>\n";
      const std::string caption =
          "recommended: " + shorten(configs[best].full_label, 2 * kMaxLabelCodePoints) + " (highest throughput)";
      text(legend, "legend", legend_x + 18, kLegendY + 1, escape(caption));
      legend_x += 18 + text_width(caption, 12) + 24;
    }
    if (any_stddev) {
      const std::string caption = "error bars: \u00b11 standard deviation over repeats";
      line(legend, "legend-errorbar", legend_x + 6, kLegendY - 9, legend_x + 6, kLegendY + 3, "#333");
      line(legend, "legend-errorbar", legend_x + 2, kLegendY - 9, legend_x + 10, kLegendY - 9, "#333");
      line(legend, "legend-errorbar", legend_x + 2, kLegendY + 3, legend_x + 10, kLegendY + 3, "#333");
      text(legend, "legend", legend_x + 18, kLegendY + 1, escape(caption));
      legend_x += 18 + text_width(caption, 12) + 24;
    }
    legend_width = legend_x - kOuterPad;
  }
  layout.width =
      std::max({layout.left + 2 * layout.panel_width + kOuterPad, title_width, legend_width + 2 * kOuterPad});

  std::string out = open_document(layout.width, layout.height, title);
  text(out, "title", kOuterPad, kTitleY, escape(title), "font-size=\"" + coord(kTitleFont) + "\" font-weight=\"bold\"");
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
