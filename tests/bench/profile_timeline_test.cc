// The timeline of a profiled step (bench/profile_timeline.h) read back as an XML tree: its lanes, the position and
// colour of each slice against the plot the axis spans, clipping to the range, escaping, and the merging of
// slices too narrow to see.
#include "bench/profile_timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zb {
namespace {

struct Node {
  std::string name;
  std::map<std::string, std::string> attributes;  // entities decoded
  std::vector<Node> children;
  std::string text;  // the element's own character data, entities decoded
  double number(const std::string& attribute) const { return std::stod(attributes.at(attribute)); }
  bool has_class(const std::string& cls) const {
    const auto it = attributes.find("class");
    return it != attributes.end() && (" " + it->second + " ").find(" " + cls + " ") != std::string::npos;
  }
  // The <title> child's text: a rect's tooltip.
  std::string title() const {
    for (const Node& child : children)
      if (child.name == "title") return child.text;
    return "";
  }
};

// A strict reader of the XML an SVG writer produces: elements, double-quoted attributes and character data with
// the predefined entities; no comments, declarations or raw '<', '>' and '&'. Anything else is an error.
class XmlReader {
 public:
  explicit XmlReader(std::string_view document) : in_(document) {}

  std::optional<Node> read_document() {
    Node root;
    skip_space();
    if (!at('<') || !read_element(root)) return fail("no root element");
    skip_space();
    if (pos_ != in_.size()) return fail("content after the root");
    return root;
  }
  const std::string& error() const { return error_; }

 private:
  std::nullopt_t fail(const std::string& why) {
    if (error_.empty()) error_ = why + " at byte " + std::to_string(pos_);
    return std::nullopt;
  }
  bool reject(const std::string& why) {
    fail(why);
    return false;
  }
  bool at(char c) const { return pos_ < in_.size() && in_[pos_] == c; }
  void skip_space() {
    while (pos_ < in_.size() && std::isspace(static_cast<unsigned char>(in_[pos_]))) ++pos_;
  }
  std::string read_name() {
    const size_t begin = pos_;
    while (pos_ < in_.size() && (std::isalnum(static_cast<unsigned char>(in_[pos_])) || in_[pos_] == '-' ||
                                 in_[pos_] == '_' || in_[pos_] == ':'))
      ++pos_;
    return std::string(in_.substr(begin, pos_ - begin));
  }
  bool decode(std::string_view raw, std::string& out) {
    static const std::map<std::string_view, char> kEntities = {
        {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '<' || raw[i] == '>') return reject("raw < or > in text");
      if (raw[i] != '&') {
        out += raw[i];
        continue;
      }
      const size_t semicolon = raw.find(';', i);
      if (semicolon == std::string_view::npos) return reject("bare &");
      const auto entity = kEntities.find(raw.substr(i + 1, semicolon - i - 1));
      if (entity == kEntities.end()) return reject("bare &");
      out += entity->second;
      i = semicolon;
    }
    return true;
  }
  bool read_element(Node& node) {
    ++pos_;  // '<'
    node.name = read_name();
    if (node.name.empty()) return reject("tag without a name");
    for (;;) {
      skip_space();
      if (at('/')) {
        ++pos_;
        if (!at('>')) return reject("'/' not followed by '>'");
        ++pos_;
        return true;
      }
      if (at('>')) break;
      const std::string attribute = read_name();
      if (attribute.empty() || !at('=')) return reject("malformed attribute");
      ++pos_;
      if (!at('"')) return reject("unquoted attribute");
      const size_t end = in_.find('"', ++pos_);
      if (end == std::string_view::npos) return reject("unterminated attribute");
      if (node.attributes.count(attribute)) return reject("attribute twice");
      if (!decode(in_.substr(pos_, end - pos_), node.attributes[attribute])) return false;
      pos_ = end + 1;
    }
    ++pos_;  // '>'
    for (;;) {
      const size_t tag = in_.find('<', pos_);
      if (tag == std::string_view::npos) return reject("<" + node.name + "> never closed");
      if (!decode(in_.substr(pos_, tag - pos_), node.text)) return false;
      pos_ = tag;
      if (in_.substr(pos_, 2) == "</") {
        pos_ += 2;
        if (read_name() != node.name || !at('>')) return reject("</...> does not close <" + node.name + ">");
        ++pos_;
        return true;
      }
      node.children.emplace_back();
      if (!read_element(node.children.back())) return false;
    }
  }

  std::string_view in_;
  size_t pos_ = 0;
  std::string error_;
};

Node parse(const std::string& svg) {
  XmlReader reader(svg);
  const std::optional<Node> root = reader.read_document();
  EXPECT_TRUE(root) << reader.error() << "\n" << svg;
  return root.value_or(Node{});
}

void collect(const Node& node, const std::string& name, const std::string& cls, std::vector<const Node*>& found) {
  if (node.name == name && (cls.empty() || node.has_class(cls))) found.push_back(&node);
  for (const Node& child : node.children) collect(child, name, cls, found);
}

// The `name` elements of class `cls` (any, where empty) under `root`, in document order.
std::vector<const Node*> find_all(const Node& root, const std::string& name, const std::string& cls = "") {
  std::vector<const Node*> found;
  collect(root, name, cls, found);
  return found;
}

// The slice rect whose tooltip starts with `name`.
const Node& slice_named(const Node& root, const std::string& name) {
  for (const Node* rect : find_all(root, "rect", "slice"))
    if (rect->title().rfind(name + " \u00b7 ", 0) == 0) return *rect;
  ADD_FAILURE() << "no slice " << name;
  static const Node kNone{"rect", {{"x", "-1"}, {"y", "-1"}, {"width", "-1"}, {"height", "-1"}}, {}, ""};
  return kNone;
}

constexpr int64_t kBegin = 1'000'000'000;  // 1 s on the trace clock
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kEnd = kBegin + 10 * kMs;

TraceSlice slice(TraceCategory category, TraceLane lane, double start_ms, double end_ms, std::string name,
                 double bytes = 0, std::string detail = "") {
  TraceSlice s;
  s.category = category;
  s.lane = lane;
  s.start_ns = kBegin + int64_t(std::llround(start_ms * kMs));
  s.end_ns = kBegin + int64_t(std::llround(end_ms * kMs));
  s.name = std::move(name);
  s.bytes = bytes;
  s.detail = std::move(detail);
  return s;
}

constexpr TraceLane kMain{false, 0}, kOptimizerThread{false, 3}, kOutsideThread{false, 5}, kStepOnlyThread{false, 9};
constexpr TraceLane kComputeStream{true, 7}, kCopyStream{true, 13};

// One GPU step of 10 ms: host threads 0 (named) and 3, device streams 7 (named) and 13. The slices are listed out
// of lane order; threads 5 and 9 have nothing drawn in the range.
ProfileWindow gpu_step() {
  ProfileWindow w;
  w.config = "stage3";
  w.device_name = "NVIDIA H200";
  w.rank = 1;
  w.world = 2;
  w.lane_names = {{kMain, "main"}, {kComputeStream, "compute <7> & \"co\""}};
  w.slices = {
      slice(TraceCategory::kernel, kComputeStream, 1.2, 1.9, "gemm <bf16> & co", 0, "grid 128x1x1"),
      slice(TraceCategory::kernel, kComputeStream, -2, 0.5, "early kernel"),
      slice(TraceCategory::kernel, kComputeStream, 9, 13, "tail kernel"),
      slice(TraceCategory::kernel, kComputeStream, 11, 12, "late kernel"),
      slice(TraceCategory::copy, kCopyStream, 0.2, 1.0, "h2d", 1024 * 1024, "HtoD"),
      slice(TraceCategory::collective, kCopyStream, 3, 5, "nccl all_reduce"),
      slice(TraceCategory::step, kMain, 0, 10, "ProfilerStep#3"),
      slice(TraceCategory::unit, kMain, 0.5, 6, "layers.0 forward"),
      slice(TraceCategory::op, kMain, 1, 2, "matmul"),
      slice(TraceCategory::op, kMain, 2.5, 3, "softmax"),
      slice(TraceCategory::wait, kMain, 6.5, 7.5, "wait for device"),
      slice(TraceCategory::cpu_optimizer, kOptimizerThread, 7, 9, "adam layers.0"),
      slice(TraceCategory::nvme, kOptimizerThread, 9, 9.5, "nvme read", 64.0 * 1024 * 1024),
      slice(TraceCategory::op, kOutsideThread, -5, -1, "before the step"),
      slice(TraceCategory::step, kStepOnlyThread, 0, 10, "ProfilerStep#3 (other thread)"),
  };
  return w;
}

// Where the plot lies: the axis line spans it.
struct Plot {
  double left = 0, right = 0;
  double x_of(double ms) const { return left + ms / 10 * (right - left); }
};

Plot plot_of(const Node& root) {
  const auto axis = find_all(root, "line", "axis");
  EXPECT_EQ(axis.size(), 1u);
  if (axis.empty()) return {};
  return {axis[0]->number("x1"), axis[0]->number("x2")};
}

TEST(ProfileTimeline, IsAStandaloneWellFormedDocument) {
  const std::string svg = render_timeline_svg("stage3 <step 3>", gpu_step(), kBegin, kEnd);
  const Node root = parse(svg);
  EXPECT_EQ(root.name, "svg");
  EXPECT_EQ(root.attributes.at("xmlns"), "http://www.w3.org/2000/svg");
  EXPECT_EQ(root.attributes.at("viewBox"), "0 0 " + root.attributes.at("width") + " " + root.attributes.at("height"));
  for (const Node* rect : find_all(root, "rect")) {
    ASSERT_TRUE(rect->attributes.count("class"));
    EXPECT_LE(rect->number("x") + rect->number("width"), root.number("width"));
    EXPECT_LE(rect->number("y") + rect->number("height"), root.number("height"));
  }
  const auto slices = find_all(root, "rect", "slice");
  EXPECT_EQ(slices.size(), 11u);  // 15 slices, less the two steps, the late kernel and the op before the step
  const std::vector<std::string> categories = {"unit",          "op",   "kernel", "collective", "copy",
                                               "cpu_optimizer", "nvme", "wait"};
  for (const Node* rect : slices) {
    const std::string cls = rect->attributes.at("class");
    EXPECT_EQ(std::count(categories.begin(), categories.end(), cls.substr(6)), 1) << cls;
    EXPECT_NE(rect->title(), "") << cls;
  }
  EXPECT_EQ(root.title(), "stage3 <step 3>");
}

TEST(ProfileTimeline, OneLanePerThreadAndStreamWithSlicesHostFirst) {
  const Node root = parse(render_timeline_svg("t", gpu_step(), kBegin, kEnd));
  const auto lanes = find_all(root, "g", "lane");
  std::vector<std::string> names;
  for (const Node* lane : lanes) names.push_back(find_all(*lane, "text", "lane-name").at(0)->text);
  EXPECT_EQ(names, (std::vector<std::string>{"main", "thread 3", "compute <7> & \"co\"", "stream 13"}));
  ASSERT_EQ(lanes.size(), 4u);
  EXPECT_TRUE(lanes[1]->has_class("host"));
  EXPECT_TRUE(lanes[2]->has_class("device"));
  const auto backgrounds = find_all(root, "rect", "lane-background");
  ASSERT_EQ(backgrounds.size(), 4u);
  const Plot plot = plot_of(root);
  for (size_t i = 0; i < lanes.size(); ++i) {
    const Node& band = *backgrounds[i];
    EXPECT_EQ(band.attributes.at("fill"), exposed_category_colour(ExposedCategory::idle));
    EXPECT_NEAR(band.number("x"), plot.left, 0.01);
    EXPECT_NEAR(band.number("width"), plot.right - plot.left, 0.01);
    if (i > 0) {
      EXPECT_GT(band.number("y"), backgrounds[i - 1]->number("y") + backgrounds[i - 1]->number("height"));
    }
    // Each lane's slices within its band, and within the plot.
    for (const Node* rect : find_all(*lanes[i], "rect", "slice")) {
      EXPECT_GE(rect->number("y"), band.number("y")) << rect->title();
      EXPECT_LE(rect->number("y") + rect->number("height"), band.number("y") + band.number("height")) << rect->title();
      EXPECT_GE(rect->number("x"), plot.left - 0.01) << rect->title();
      EXPECT_LE(rect->number("x") + rect->number("width"), plot.right + 0.01) << rect->title();
    }
  }
  EXPECT_EQ(find_all(*lanes[0], "rect", "slice").size(), 4u);  // unit, two ops, wait
  EXPECT_EQ(find_all(*lanes[2], "rect", "slice").size(), 3u);  // the late kernel is not there
}

TEST(ProfileTimeline, SlicesSitWhereTheirTimeIsAndAreClippedToTheRange) {
  const Node root = parse(render_timeline_svg("t", gpu_step(), kBegin, kEnd));
  const Plot plot = plot_of(root);
  EXPECT_NEAR(plot.right - plot.left, 1000, 0.01);
  const auto expect_span = [&](const std::string& name, double start_ms, double end_ms) {
    const Node& rect = slice_named(root, name);
    EXPECT_NEAR(rect.number("x"), plot.x_of(start_ms), 0.01) << name;
    EXPECT_NEAR(rect.number("width"), plot.x_of(end_ms) - plot.x_of(start_ms), 0.01) << name;
  };
  expect_span("matmul", 1, 2);
  expect_span("gemm <bf16> & co", 1.2, 1.9);
  expect_span("early kernel", 0, 0.5);  // from -2 ms
  expect_span("tail kernel", 9, 10);    // to 13 ms
  expect_span("nvme read", 9, 9.5);
  for (const Node* rect : find_all(root, "rect", "slice")) {
    EXPECT_EQ(rect->title().find("late kernel"), std::string::npos);
    EXPECT_EQ(rect->title().find("before the step"), std::string::npos);
    EXPECT_FALSE(rect->has_class("step"));
  }
  // A tooltip gives the whole slice's duration, not the part drawn.
  EXPECT_EQ(slice_named(root, "tail kernel").title(), "tail kernel \u00b7 4.00 ms");
  EXPECT_EQ(slice_named(root, "nvme read").title(), "nvme read \u00b7 0.500 ms \u00b7 64.0 MiB");
  EXPECT_EQ(slice_named(root, "h2d").title(), "h2d \u00b7 0.800 ms \u00b7 1.00 MiB \u00b7 HtoD");
}

TEST(ProfileTimeline, BusySlicesTakeTheirExposedCategorysColour) {
  const Node root = parse(render_timeline_svg("t", gpu_step(), kBegin, kEnd));
  const auto fill = [&](const std::string& name) { return slice_named(root, name).attributes.at("fill"); };
  EXPECT_EQ(fill("gemm <bf16> & co"), exposed_category_colour(ExposedCategory::compute));
  EXPECT_EQ(fill("nccl all_reduce"), exposed_category_colour(ExposedCategory::collectives));
  EXPECT_EQ(fill("h2d"), exposed_category_colour(ExposedCategory::copies));
  EXPECT_EQ(fill("adam layers.0"), exposed_category_colour(ExposedCategory::cpu_optimizer));
  EXPECT_EQ(fill("nvme read"), exposed_category_colour(ExposedCategory::nvme));
  // On a GPU a host op is a launch: outlined in the colour of what it launches.
  EXPECT_EQ(fill("matmul"), "white");
  EXPECT_EQ(slice_named(root, "matmul").attributes.at("stroke"), exposed_category_colour(ExposedCategory::compute));
  EXPECT_EQ(fill("wait for device"), "url(#wait-hatch)");
  EXPECT_EQ(find_all(root, "pattern").at(0)->attributes.at("id"), "wait-hatch");
  // Where ops run on the host, they are the compute itself.
  ProfileWindow cpu = gpu_step();
  cpu.ops_run_on_host = true;
  const Node cpu_root = parse(render_timeline_svg("t", cpu, kBegin, kEnd));
  EXPECT_EQ(slice_named(cpu_root, "matmul").attributes.at("fill"), exposed_category_colour(ExposedCategory::compute));

  // The legend: the six exposed categories, idle included, then the styles drawn.
  std::vector<std::string> legend;
  for (const Node* swatch : find_all(root, "rect", "swatch")) legend.push_back(swatch->attributes.at("class"));
  EXPECT_EQ(legend,
            (std::vector<std::string>{"swatch compute", "swatch collectives", "swatch copies", "swatch cpu_optimizer",
                                      "swatch nvme", "swatch idle", "swatch launch", "swatch wait", "swatch unit"}));
  for (int c = 0; c < kExposedCategories; ++c) {
    const auto category = ExposedCategory(c);
    EXPECT_EQ(find_all(root, "rect", exposed_category_name(category)).at(0)->attributes.at("fill"),
              exposed_category_colour(category));
  }
}

TEST(ProfileTimeline, UnitsFrameTheirOpsWithoutHidingThem) {
  const Node root = parse(render_timeline_svg("t", gpu_step(), kBegin, kEnd));
  const Node& unit = slice_named(root, "layers.0 forward");
  const Node& op = slice_named(root, "matmul");
  const Node& lane = *find_all(root, "rect", "lane-background").at(0);
  EXPECT_EQ(unit.number("y"), lane.number("y"));  // along the top edge
  EXPECT_LT(unit.number("height"), op.number("height") / 2);
  EXPECT_GE(op.number("y"), unit.number("y") + unit.number("height"));  // below it: nothing covers the op
  EXPECT_NEAR(op.number("y") + op.number("height"), lane.number("y") + lane.number("height"), 0.01);
  const auto names = find_all(root, "text", "unit-name");
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0]->text, "layers.0 forward");
  EXPECT_GT(names[0]->number("x"), unit.number("x"));
  // The step is named, not drawn.
  const auto subtitle = find_all(root, "text", "subtitle");
  ASSERT_EQ(subtitle.size(), 1u);
  EXPECT_EQ(subtitle[0]->text,
            "stage3 \u00b7 ProfilerStep#3, ProfilerStep#3 (other thread) \u00b7 10.0 ms \u00b7 NVIDIA H200 \u00b7 "
            "rank 1 of 2");
}

TEST(ProfileTimeline, TimeAxisHasNiceTicksInMilliseconds) {
  const Node root = parse(render_timeline_svg("t", gpu_step(), kBegin, kEnd));
  const Plot plot = plot_of(root);
  const auto ticks = find_all(root, "text", "tick");
  ASSERT_EQ(ticks.size(), 11u);  // 0, 1, ..., 10 ms
  for (size_t i = 0; i < ticks.size(); ++i) {
    EXPECT_EQ(ticks[i]->text, std::to_string(i));
    EXPECT_NEAR(ticks[i]->number("x"), plot.x_of(double(i)), 0.01);
  }
  // 3 ms: a step of 0.5 ms, the labels with one decimal.
  const Node short_root = parse(render_timeline_svg("t", gpu_step(), kBegin, kBegin + 3 * kMs));
  const auto short_ticks = find_all(short_root, "text", "tick");
  ASSERT_EQ(short_ticks.size(), 7u);
  EXPECT_EQ(short_ticks[1]->text, "0.5");
  EXPECT_EQ(short_ticks[6]->text, "3.0");
}

TEST(ProfileTimeline, EscapesNamesAndIsDeterministic) {
  const std::string svg = render_timeline_svg("a <b> & c", gpu_step(), kBegin, kEnd);
  EXPECT_EQ(svg.find("<bf16>"), std::string::npos);
  EXPECT_NE(svg.find("gemm &lt;bf16&gt; &amp; co \u00b7 0.700 ms \u00b7 grid 128x1x1"), std::string::npos);
  EXPECT_NE(svg.find("compute &lt;7&gt; &amp; &quot;co&quot;"), std::string::npos);
  EXPECT_EQ(slice_named(parse(svg), "gemm <bf16> & co").title(),
            "gemm <bf16> & co \u00b7 0.700 ms \u00b7 grid 128x1x1");
  EXPECT_EQ(svg, render_timeline_svg("a <b> & c", gpu_step(), kBegin, kEnd));
}

// 10,000 kernels of 10 ns, one every microsecond, over a 10 ms step.
ProfileWindow many_tiny_kernels() {
  ProfileWindow w;
  for (int i = 0; i < 10'000; ++i) {
    TraceSlice s = slice(TraceCategory::kernel, kComputeStream, 0, 0, "elementwise " + std::to_string(i));
    s.start_ns = kBegin + int64_t(i) * 1000;
    s.end_ns = s.start_ns + 10;
    w.slices.push_back(std::move(s));
  }
  return w;
}

TEST(ProfileTimeline, MergesSlicesTooNarrowToSee) {
  const std::string svg = render_timeline_svg("t", many_tiny_kernels(), kBegin, kEnd);
  const Node root = parse(svg);
  const Plot plot = plot_of(root);
  // A run spans at most 2 px: kernels k apart by 1 us span (k - 1) us + 10 ns.
  const double ns_per_px = 10.0 * kMs / (plot.right - plot.left);
  const int per_run = int(std::floor((2 * ns_per_px - 10) / 1000)) + 1;
  const size_t expected_rects = size_t((10'000 + per_run - 1) / per_run);
  EXPECT_EQ(expected_rects, 500u);  // on the 1000 px plot
  const auto rects = find_all(root, "rect", "slice");
  ASSERT_EQ(rects.size(), expected_rects);
  size_t merged = 0;
  for (const Node* rect : rects) {
    EXPECT_TRUE(rect->has_class("merged"));
    EXPECT_LE(rect->number("width"), 2.0);
    EXPECT_EQ(rect->attributes.at("fill-opacity"), "0.30");  // 10 ns busy a microsecond: the least opacity
    merged += std::stoul(rect->title());
  }
  EXPECT_EQ(merged, 10'000u);
  EXPECT_EQ(rects[0]->title(), "20 kernel slices merged \u00b7 0.000200 ms busy in 0.0190 ms");
  const auto note = find_all(root, "text", "note");
  ASSERT_EQ(note.size(), 1u);
  EXPECT_EQ(note[0]->text, "10000 slices narrower than 0.5 px merged into 500 rects");
  EXPECT_LT(svg.size(), 200'000u);
}

TEST(ProfileTimeline, MergesOnlyNarrowNeighboursOfOneCategory) {
  ProfileWindow w;
  // 100 kernels of 100 ns back to back (10 us: 1 px), a copy among them, a kernel 1 ms later and a wide one.
  for (int i = 0; i < 100; ++i) {
    TraceSlice s = slice(TraceCategory::kernel, kComputeStream, 0, 0, "k");
    s.start_ns = kBegin + 2 * kMs + i * 100;
    s.end_ns = s.start_ns + 100;
    w.slices.push_back(std::move(s));
  }
  w.slices.push_back(slice(TraceCategory::copy, kComputeStream, 2.001, 2.002, "copy"));
  w.slices.push_back(slice(TraceCategory::kernel, kComputeStream, 3.0, 3.0001, "alone"));
  w.slices.push_back(slice(TraceCategory::kernel, kComputeStream, 3.0002, 4, "wide"));
  const Node root = parse(render_timeline_svg("t", w, kBegin, kEnd));
  const auto merged = find_all(root, "rect", "merged");
  ASSERT_EQ(merged.size(), 1u);
  EXPECT_EQ(merged[0]->title(), "100 kernel slices merged \u00b7 0.0100 ms busy in 0.0100 ms");
  EXPECT_EQ(merged[0]->attributes.at("fill-opacity"), "1.00");
  EXPECT_NEAR(merged[0]->number("width"), 1, 0.01);
  EXPECT_EQ(find_all(root, "rect", "slice").size(), 4u);
  EXPECT_NEAR(slice_named(root, "alone").number("width"), 0.5, 1e-9);  // widened to be seen
  EXPECT_FALSE(slice_named(root, "copy").has_class("merged"));
  EXPECT_EQ(find_all(root, "text", "note").at(0)->text, "100 slices narrower than 0.5 px merged into 1 rect");
}

TEST(ProfileTimeline, EmptyRangeOrNoSlicesStillGivesADocument) {
  ProfileWindow only_steps;
  only_steps.slices = {slice(TraceCategory::step, kMain, 0, 10, "ProfilerStep#0")};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {render_timeline_svg("t", gpu_step(), kEnd, kBegin), "empty range: nothing to draw"},
      {render_timeline_svg("t", gpu_step(), kBegin, kBegin), "empty range: nothing to draw"},
      {render_timeline_svg("t", ProfileWindow{}, kBegin, kEnd), "no slices in this range"},
      {render_timeline_svg("t", only_steps, kBegin, kEnd), "no slices in this range"},
      {render_timeline_svg("t", gpu_step(), kEnd + 20 * kMs, kEnd + 30 * kMs), "no slices in this range"},
  };
  for (const auto& [svg, message] : cases) {
    const Node root = parse(svg);
    EXPECT_EQ(root.name, "svg");
    EXPECT_TRUE(find_all(root, "rect", "slice").empty());
    const auto text = find_all(root, "text", "message");
    ASSERT_EQ(text.size(), 1u);
    EXPECT_EQ(text[0]->text, message);
  }
}

}  // namespace
}  // namespace zb
