// The timeline as SVG text: which slices are drawn on which lane, the merging of narrow ones, and the layout
// (text widths estimated from character counts, since no font metrics are at hand).
#include "bench/profile_timeline.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "bench/svg_document.h"

namespace zb {
namespace {

// Layout, in pixels.
constexpr double kOuterPad = 16;
constexpr double kPlotWidth = 1000;
constexpr double kMinLaneNameWidth = 60;
constexpr double kLaneNameGap = 8;
constexpr double kRightMargin = 24;
constexpr double kTitleY = 30;
constexpr double kSubtitleY = 50;
constexpr double kLegendY = 76;
constexpr double kLanesTop = 94;
constexpr double kLaneHeight = 36;
constexpr double kLaneGap = 6;
constexpr double kDeviceGroupGap = 12;  // between the host threads and the device streams
constexpr double kUnitBandHeight = 10;  // units along a lane's top edge, above the working height
constexpr double kUnitBandGap = 2;
constexpr double kTitleFont = 18;
constexpr double kTextFont = 12;
constexpr double kLaneNameFont = 11;
constexpr double kUnitNameFont = 9;
constexpr double kSwatchSize = 12;
constexpr size_t kMaxLaneNameCodePoints = 28;  // longer ones are cut (the full name is the tooltip)
constexpr size_t kMinUnitNameCodePoints = 4;   // a unit name cut shorter than this says nothing
constexpr size_t kMaxSubtitleSteps = 3;
constexpr int kMaxTickIntervals = 10;

// Narrower than this, a slice would vanish on its own: runs of them merge, and every rect is at least this wide.
constexpr double kNarrowPx = 0.5;
// A merged run ends at this width, so that its opacity still tells how busy that part of the lane was.
constexpr double kMaxRunPx = 2;
constexpr double kMinMergedOpacity = 0.3;

constexpr const char* kUnitColour = "#5f6b7a";
constexpr const char* kWaitStroke = "#8c8c8c";
constexpr const char* kInkColour = "#333";
constexpr const char* kMutedInk = "#555";
constexpr const char* kWaitFill = "url(#wait-hatch)";
constexpr const char* kWaitHatch =
    "<defs><pattern id=\"wait-hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
    "patternTransform=\"rotate(45)\"><rect class=\"hatch\" x=\"0\" y=\"0\" width=\"6\" height=\"6\" fill=\"white\"/>"
    "<line class=\"hatch\" x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#9a9a9a\" "
    "stroke-width=\"2\"/></pattern></defs>\n";

// How a slice is drawn. Launches are a GPU's host op and collective slices: the work they start runs on a stream.
enum class SliceStyle { busy, launch, wait, unit };

// None for steps: the picture is one step wide.
std::optional<SliceStyle> style_of(const TraceSlice& slice, bool ops_run_on_host) {
  switch (slice.category) {
    case TraceCategory::step: return std::nullopt;
    case TraceCategory::unit: return SliceStyle::unit;
    case TraceCategory::wait: return SliceStyle::wait;
    default: return busy_category(slice, ops_run_on_host) ? SliceStyle::busy : SliceStyle::launch;
  }
}

// The colour of a busy slice, or of the work a launch starts (what it would be where ops run on the host).
const char* slice_colour(const TraceSlice& slice, bool ops_run_on_host) {
  const std::optional<ExposedCategory> busy = busy_category(slice, ops_run_on_host);
  const std::optional<ExposedCategory> launched = busy_category(slice, /*ops_run_on_host=*/true);
  return exposed_category_colour(busy.value_or(launched.value_or(ExposedCategory::idle)));
}

// One rect: a slice's part within the range, or a run of narrow slices of one category merged.
struct DrawnRect {
  int64_t start_ns = 0, end_ns = 0;
  int64_t busy_ns = 0;  // the time its slices cover: less than its span where a merged run has gaps
  size_t slices = 1;
  const TraceSlice* first = nullptr;
  size_t order = 0;  // of `first` in the window: the last tie-break, which keeps the output deterministic
};

struct MergeCount {
  size_t slices = 0, rects = 0;
};

struct TimeScale {
  int64_t begin_ns = 0;
  double left = 0;  // x of begin_ns
  double px_per_ns = 0;
  double px(int64_t duration_ns) const { return double(duration_ns) * px_per_ns; }
  // x and width of a rect: at least kNarrowPx wide, within the plot.
  std::pair<double, double> extent(const DrawnRect& r) const {
    const double width = std::max(px(r.end_ns - r.start_ns), kNarrowPx);
    return {std::min(left + px(r.start_ns - begin_ns), left + kPlotWidth - width), width};
  }
};

// The slices drawn on each lane, clipped to [begin_ns, end_ns). An instant slice counts where it lies in the range;
// a slice whose end precedes its start counts as an instant.
std::map<TraceLane, std::vector<DrawnRect>> clipped_slices(const ProfileWindow& window, int64_t begin_ns,
                                                           int64_t end_ns) {
  std::map<TraceLane, std::vector<DrawnRect>> lanes;
  for (size_t i = 0; i < window.slices.size(); ++i) {
    const TraceSlice& s = window.slices[i];
    if (!style_of(s, window.ops_run_on_host)) continue;
    const int64_t slice_end = std::max(s.end_ns, s.start_ns);
    if (s.start_ns >= end_ns || (slice_end <= begin_ns && s.start_ns < begin_ns)) continue;
    const int64_t start = std::max(s.start_ns, begin_ns), end = std::min(slice_end, end_ns);
    lanes[s.lane].push_back({start, end, end - start, 1, &s, i});
  }
  return lanes;
}

// Within each category, by start: a narrow slice joins the run before it where that run is of narrow slices, the
// slice starts within kNarrowPx of its end and the run stays within kMaxRunPx. Returns the rects in drawing order:
// by start, the longer first, so that a slice nested in another is drawn over it.
std::vector<DrawnRect> merge_narrow_runs(std::vector<DrawnRect> slices, const TimeScale& scale, MergeCount& merged) {
  std::sort(slices.begin(), slices.end(), [](const DrawnRect& a, const DrawnRect& b) {
    return std::tuple(a.first->category, a.start_ns, b.end_ns, a.order) <
           std::tuple(b.first->category, b.start_ns, a.end_ns, b.order);
  });
  std::vector<DrawnRect> rects;
  bool run_open = false;
  for (const DrawnRect& s : slices) {
    const bool narrow = scale.px(s.end_ns - s.start_ns) < kNarrowPx;
    if (narrow && run_open && rects.back().first->category == s.first->category) {
      DrawnRect& run = rects.back();
      const bool adjacent = scale.px(s.start_ns - run.end_ns) < kNarrowPx;
      if (adjacent && scale.px(std::max(run.end_ns, s.end_ns) - run.start_ns) <= kMaxRunPx) {
        run.busy_ns += std::max<int64_t>(0, s.end_ns - std::max(s.start_ns, run.end_ns));
        run.end_ns = std::max(run.end_ns, s.end_ns);
        ++run.slices;
        continue;
      }
    }
    rects.push_back(s);
    run_open = narrow;
  }
  for (const DrawnRect& r : rects) {
    if (r.slices == 1) continue;
    merged.slices += r.slices;
    ++merged.rects;
  }
  std::sort(rects.begin(), rects.end(), [](const DrawnRect& a, const DrawnRect& b) {
    return std::tuple(a.start_ns, b.end_ns, a.order) < std::tuple(b.start_ns, a.end_ns, b.order);
  });
  return rects;
}

// Milliseconds with three significant digits or more, at least one decimal: "412.5", "1.23", "0.0100".
std::string milliseconds(int64_t ns) {
  const double ms = double(ns) / 1e6;
  if (!(ms > 0)) return "0";
  return svg_fixed(ms, std::clamp(2 - int(std::floor(std::log10(ms))), 1, 6));
}

// Binary units, three significant digits: "512 B", "1.00 MiB", "64.0 MiB".
std::string byte_size(double bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  for (; bytes >= 1024 && unit + 1 < std::size(kUnits); ++unit) bytes /= 1024;
  return svg_fixed(bytes, unit == 0 ? 0 : bytes < 10 ? 2 : bytes < 100 ? 1 : 0) + " " + kUnits[unit];
}

// A rect's <title>, escaped: a slice's name, whole duration (not only the part drawn), bytes and detail; a merged
// run's count and how much of its span its slices cover.
std::string tooltip(const DrawnRect& r) {
  const TraceSlice& s = *r.first;
  if (r.slices > 1)
    return std::to_string(r.slices) + " " + trace_category_name(s.category) + " slices merged \u00b7 " +
           milliseconds(r.busy_ns) + " ms busy in " + milliseconds(r.end_ns - r.start_ns) + " ms";
  std::string text = escape_xml(s.name.empty() ? trace_category_name(s.category) : s.name) + " \u00b7 " +
                     milliseconds(std::max<int64_t>(0, s.end_ns - s.start_ns)) + " ms";
  if (std::isfinite(s.bytes) && s.bytes > 0) text += " \u00b7 " + byte_size(s.bytes);
  if (!s.detail.empty()) text += " \u00b7 " + escape_xml(s.detail);
  return text;
}

std::string paint(SliceStyle style, const char* colour) {
  switch (style) {
    case SliceStyle::busy: return std::string("fill=\"") + colour + "\"";
    case SliceStyle::launch: return std::string("fill=\"white\" stroke=\"") + colour + "\" stroke-width=\"1\"";
    case SliceStyle::wait:
      return std::string("fill=\"") + kWaitFill + "\" stroke=\"" + kWaitStroke + "\" stroke-width=\"0.5\"";
    case SliceStyle::unit: return std::string("fill=\"") + kUnitColour + "\"";
  }
  return "";
}

void append_rect(std::string& out, std::string_view classes, double x, double y, double width, double height,
                 std::string_view paint_attributes, std::string_view escaped_tooltip = "") {
  out += "<rect class=\"";
  out += classes;
  out += "\" x=\"" + svg_coord(x) + "\" y=\"" + svg_coord(y) + "\" width=\"" + svg_coord(width) + "\" height=\"" +
         svg_coord(height) + "\" ";
  out += paint_attributes;
  if (escaped_tooltip.empty()) {
    out += "/>\n";
    return;
  }
  out += "><title>";
  out += escaped_tooltip;
  out += "</title></rect>\n";
}

// Where a lane lies; lanes with units give them a band along the top, the rest of the lane is the working height.
struct LaneBox {
  double top = 0;
  bool has_units = false;
  double work_top() const { return has_units ? top + kUnitBandHeight + kUnitBandGap : top; }
  double bottom() const { return top + kLaneHeight; }
};

struct Lane {
  TraceLane id;
  std::string name;
  std::vector<DrawnRect> rects;
  LaneBox box;
};

std::string lane_name(const ProfileWindow& window, TraceLane lane) {
  const auto it = window.lane_names.find(lane);
  if (it != window.lane_names.end() && !it->second.empty()) return it->second;
  return (lane.device ? "stream " : "thread ") + std::to_string(lane.id);
}

// A unit's name inside its bar, cut to the bar's width; empty where too little of it would fit.
std::string unit_label(const std::string& name, double bar_width) {
  const double room = bar_width - 6;
  const auto fitting = size_t(std::max(0.0, std::floor(room / estimated_text_width("x", kUnitNameFont))));
  if (fitting >= utf8_code_points(name)) return name;
  return fitting >= kMinUnitNameCodePoints ? shorten_text(name, fitting) : "";
}

void append_lane(std::string& out, const Lane& lane, const TimeScale& scale, bool ops_run_on_host) {
  out += std::string("<g class=\"lane ") + (lane.id.device ? "device" : "host") + "\">\n";
  const std::string name = shorten_text(lane.name, kMaxLaneNameCodePoints);
  const std::string full_name = name == lane.name ? "" : "<title>" + escape_xml(lane.name) + "</title>";
  append_svg_text(out, "lane-name", scale.left - kLaneNameGap, lane.box.top + kLaneHeight / 2 + 4,
                  full_name + escape_xml(name), "text-anchor=\"end\" font-size=\"" + svg_coord(kLaneNameFont) + "\"");
  for (const DrawnRect& r : lane.rects) {
    const TraceSlice& s = *r.first;
    const SliceStyle style = *style_of(s, ops_run_on_host);
    const auto [x, width] = scale.extent(r);
    const double top = style == SliceStyle::unit ? lane.box.top : lane.box.work_top();
    const double height = style == SliceStyle::unit ? kUnitBandHeight : lane.box.bottom() - top;
    std::string attributes = paint(style, slice_colour(s, ops_run_on_host));
    std::string classes = std::string("slice ") + trace_category_name(s.category);
    if (r.slices > 1) {
      classes += " merged";
      const double density = std::clamp(scale.px(r.busy_ns) / width, kMinMergedOpacity, 1.0);
      attributes += " fill-opacity=\"" + svg_fixed(density, 2) + "\"";
    }
    append_rect(out, classes, x, top, width, height, attributes, tooltip(r));
    if (style != SliceStyle::unit || r.slices > 1) continue;
    const std::string label = unit_label(s.name, width);
    if (!label.empty())
      append_svg_text(out, "unit-name", x + 3, top + kUnitBandHeight - 2, escape_xml(label),
                      "font-size=\"" + svg_coord(kUnitNameFont) + "\" fill=\"white\"");
  }
  out += "</g>\n";
}

struct LegendEntry {
  std::string name;  // the swatch's class, and its caption
  std::string paint;
  double height = kSwatchSize;
};

// The six exposed categories, then the other styles that the picture uses.
std::vector<LegendEntry> legend_entries(const std::vector<Lane>& lanes, bool ops_run_on_host) {
  std::vector<LegendEntry> entries;
  for (int c = 0; c < kExposedCategories; ++c) {
    const auto category = ExposedCategory(c);
    entries.push_back({exposed_category_name(category), paint(SliceStyle::busy, exposed_category_colour(category))});
  }
  bool used[int(SliceStyle::unit) + 1] = {};
  for (const Lane& lane : lanes)
    for (const DrawnRect& r : lane.rects) used[int(*style_of(*r.first, ops_run_on_host))] = true;
  const char* compute = exposed_category_colour(ExposedCategory::compute);
  if (used[int(SliceStyle::launch)]) entries.push_back({"launch", paint(SliceStyle::launch, compute)});
  if (used[int(SliceStyle::wait)]) entries.push_back({"wait", paint(SliceStyle::wait, compute)});
  if (used[int(SliceStyle::unit)]) entries.push_back({"unit", paint(SliceStyle::unit, compute), kSwatchSize / 2});
  return entries;
}

// Returns the legend's width.
double append_legend(std::string& out, const std::vector<LegendEntry>& entries) {
  double x = kOuterPad;
  for (const LegendEntry& e : entries) {
    append_rect(out, "swatch " + e.name, x, kLegendY - 10, kSwatchSize, e.height, e.paint);
    append_svg_text(out, "legend", x + kSwatchSize + 6, kLegendY, escape_xml(e.name));
    x += kSwatchSize + 6 + estimated_text_width(e.name, kTextFont) + 16;
  }
  return x - kOuterPad;
}

// What the range is: the configuration, the steps in it, its length, the device and the rank.
std::string subtitle(const ProfileWindow& window, int64_t begin_ns, int64_t end_ns) {
  std::vector<std::string> parts;
  if (!window.config.empty()) parts.push_back(window.config);
  std::vector<std::string> steps;
  for (const TraceSlice* step : window_steps(window))
    if (step->start_ns < end_ns && step->end_ns > begin_ns) steps.push_back(step->name);
  if (steps.size() > kMaxSubtitleSteps) {
    steps.resize(kMaxSubtitleSteps);
    steps.back() = "\u2026";
  }
  std::string step_names;
  for (const std::string& s : steps) step_names += (step_names.empty() ? "" : ", ") + s;
  if (!step_names.empty()) parts.push_back(step_names);
  parts.push_back(milliseconds(end_ns - begin_ns) + " ms");
  if (!window.device_name.empty()) parts.push_back(window.device_name);
  if (window.world > 1) parts.push_back("rank " + std::to_string(window.rank) + " of " + std::to_string(window.world));
  std::string text;
  for (const std::string& p : parts) text += (text.empty() ? "" : " \u00b7 ") + p;
  return text;
}

// The time axis under the lanes, with a grid line across them at each tick. Returns the y under its title.
double append_axis(std::string& out, const TimeScale& scale, int64_t range_ns, double lanes_bottom) {
  const double range_ms = double(range_ns) / 1e6;
  const NiceAxis axis = nice_axis(range_ms, kMaxTickIntervals);
  const double axis_y = lanes_bottom + 8, right = scale.left + kPlotWidth;
  for (int t = 0; t <= axis.intervals; ++t) {
    const double value = t * axis.step();
    if (value > range_ms * (1 + 1e-9)) break;  // the tolerance keeps a tick that rounding put a hair past the end
    const double x = scale.left + value / range_ms * kPlotWidth;
    append_svg_line(out, "grid", x, kLanesTop, x, lanes_bottom, "white");
    append_svg_line(out, "tick-mark", x, axis_y, x, axis_y + 4, kInkColour);
    append_svg_text(out, "tick", x, axis_y + 17, svg_fixed(value, axis.decimals()),
                    std::string("text-anchor=\"middle\" font-size=\"11\" fill=\"") + kMutedInk + "\"");
  }
  append_svg_line(out, "axis", scale.left, axis_y, right, axis_y, kInkColour);
  append_svg_text(out, "axis-title", scale.left + kPlotWidth / 2, axis_y + 36, "time (ms)", "text-anchor=\"middle\"");
  return axis_y + 36;
}

std::string message_document(const std::string& title, const std::string& message) {
  const double width =
      std::max({480.0, estimated_text_width(title, kTitleFont), estimated_text_width(message, 14)}) + 2 * kOuterPad;
  std::string out = open_svg_document(width, 100, title);
  append_svg_title(out, kOuterPad, kTitleY, kTitleFont, title);
  append_svg_text(out, "message", kOuterPad, kTitleY + 36, escape_xml(message), "font-size=\"14\"");
  return out + "</svg>\n";
}

}  // namespace

std::string render_timeline_svg(const std::string& title, const ProfileWindow& window, int64_t begin_ns,
                                int64_t end_ns) {
  if (end_ns <= begin_ns) return message_document(title, "empty range: nothing to draw");
  std::map<TraceLane, std::vector<DrawnRect>> clipped = clipped_slices(window, begin_ns, end_ns);
  if (clipped.empty()) return message_document(title, "no slices in this range");

  TimeScale scale{begin_ns, 0, kPlotWidth / double(end_ns - begin_ns)};
  std::vector<Lane> lanes;
  double widest_name = kMinLaneNameWidth;
  MergeCount merged;
  double y = kLanesTop;
  for (const TraceLane& id : ordered_lanes(window)) {
    const auto found = clipped.find(id);
    if (found == clipped.end()) continue;
    Lane lane{id, lane_name(window, id), merge_narrow_runs(std::move(found->second), scale, merged), {}};
    if (id.device && !lanes.empty() && !lanes.back().id.device) y += kDeviceGroupGap;
    lane.box.top = y;
    lane.box.has_units = std::any_of(lane.rects.begin(), lane.rects.end(),
                                     [](const DrawnRect& r) { return r.first->category == TraceCategory::unit; });
    y += kLaneHeight + kLaneGap;
    widest_name =
        std::max(widest_name, estimated_text_width(shorten_text(lane.name, kMaxLaneNameCodePoints), kLaneNameFont));
    lanes.push_back(std::move(lane));
  }
  const double lanes_bottom = y - kLaneGap;
  scale.left = kOuterPad + widest_name + kLaneNameGap;

  std::string body;
  const double legend_width = append_legend(body, legend_entries(lanes, window.ops_run_on_host));
  for (const Lane& lane : lanes)
    append_rect(body, "lane-background", scale.left, lane.box.top, kPlotWidth, kLaneHeight,
                std::string("fill=\"") + exposed_category_colour(ExposedCategory::idle) + "\"");
  double bottom = append_axis(body, scale, end_ns - begin_ns, lanes_bottom);
  for (const Lane& lane : lanes) append_lane(body, lane, scale, window.ops_run_on_host);
  std::string note;
  if (merged.slices > 0) {
    note = std::to_string(merged.slices) + " slices narrower than " + svg_coord(kNarrowPx) + " px merged into " +
           std::to_string(merged.rects) + (merged.rects == 1 ? " rect" : " rects");
    bottom += 22;
    append_svg_text(body, "note", kOuterPad, bottom, note, std::string("font-size=\"11\" fill=\"") + kMutedInk + "\"");
  }

  const std::string sub = subtitle(window, begin_ns, end_ns);
  const double width =
      std::max({scale.left + kPlotWidth + kRightMargin, legend_width + 2 * kOuterPad,
                estimated_text_width(title, kTitleFont) + 2 * kOuterPad,
                estimated_text_width(sub, kTextFont) + 2 * kOuterPad, estimated_text_width(note, 11) + 2 * kOuterPad});
  std::string out = open_svg_document(width, bottom + kOuterPad, title);
  out += kWaitHatch;
  append_svg_title(out, kOuterPad, kTitleY, kTitleFont, title);
  append_svg_text(out, "subtitle", kOuterPad, kSubtitleY, escape_xml(sub), std::string("fill=\"") + kMutedInk + "\"");
  return out + body + "</svg>\n";
}

}  // namespace zb
