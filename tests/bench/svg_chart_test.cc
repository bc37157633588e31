// The benchmark comparison chart (bench/svg_chart.h) read back as a browser would need it: a well-formed standalone
// SVG whose bars, ticks and labels say what the numbers say, whatever the labels contain and whatever the inputs.
#include "bench/svg_chart.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace zb {
namespace {

struct Element {
  std::map<std::string, std::string> attributes;
  std::string text;  // up to the first child tag or the end tag
  double number(const std::string& name) const { return std::stod(attributes.at(name)); }
  bool has_class(const std::string& cls) const {
    const auto it = attributes.find("class");
    if (it == attributes.end()) return false;
    return (" " + it->second + " ").find(" " + cls + " ") != std::string::npos;
  }
};

// The `name` elements whose class list holds every one of `classes` (space-separated), in document order.
std::vector<Element> elements(const std::string& svg, const std::string& name, const std::string& classes = "") {
  std::vector<Element> found;
  const std::regex start("<" + name + R"(((?:\s+[\w:-]+="[^"]*")*)\s*(/?)>)");
  const std::regex attribute(R"re(([\w:-]+)="([^"]*)")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), start); it != std::sregex_iterator(); ++it) {
    Element e;
    const std::string attributes = (*it)[1];
    for (auto a = std::sregex_iterator(attributes.begin(), attributes.end(), attribute); a != std::sregex_iterator();
         ++a)
      e.attributes[(*a)[1]] = (*a)[2];
    if ((*it)[2].length() == 0) {
      const size_t begin = size_t(it->position() + it->length());
      e.text = svg.substr(begin, svg.find('<', begin) - begin);
    }
    bool wanted = true;
    std::istringstream wanted_classes(classes);
    for (std::string cls; wanted_classes >> cls;) wanted = wanted && e.has_class(cls);
    if (wanted) found.push_back(e);
  }
  return found;
}

// Enough of XML to tell that a browser will parse the document: tags nest and close, the one root is <svg>,
// attributes are quoted, every '&' starts an entity, and no '>' or '<' stands raw in text or attributes.
testing::AssertionResult well_formed(const std::string& svg) {
  std::vector<std::string> open;
  bool root_seen = false;
  const std::regex tag(R"(<(/?)([A-Za-z][\w:-]*)((?:\s+[\w:-]+="[^"<>]*")*)\s*(/?)>)");
  const std::regex entity(R"(&(amp|lt|gt|quot|apos|#[0-9]+|#x[0-9A-Fa-f]+);)");
  for (size_t i = 0; i < svg.size();) {
    std::smatch m;
    if (svg[i] == '<') {
      if (!std::regex_search(svg.cbegin() + long(i), svg.cend(), m, tag, std::regex_constants::match_continuous))
        return testing::AssertionFailure() << "malformed tag at " << i << ": " << svg.substr(i, 60);
      const std::string name = m[2];
      if (m[1].length() > 0) {
        if (open.empty() || open.back() != name)
          return testing::AssertionFailure() << "</" << name << "> closes " << (open.empty() ? "nothing" : open.back());
        open.pop_back();
      } else {
        if (open.empty() && root_seen) return testing::AssertionFailure() << "a second root <" << name << ">";
        if (open.empty() && name != "svg") return testing::AssertionFailure() << "root is <" << name << ">";
        root_seen = true;
        if (m[4].length() == 0) open.push_back(name);
      }
      const std::string attributes = m[3];
      for (size_t a = attributes.find('&'); a != std::string::npos; a = attributes.find('&', a + 1))
        if (!std::regex_search(attributes.cbegin() + long(a), attributes.cend(), entity,
                               std::regex_constants::match_continuous))
          return testing::AssertionFailure() << "bare & in attributes: " << attributes;
      i += size_t(m.length());
    } else if (svg[i] == '&') {
      if (!std::regex_search(svg.cbegin() + long(i), svg.cend(), m, entity, std::regex_constants::match_continuous))
        return testing::AssertionFailure() << "bare & at " << i << ": " << svg.substr(i, 20);
      i += size_t(m.length());
    } else if (svg[i] == '>') {
      return testing::AssertionFailure() << "raw > in text at " << i << ": " << svg.substr(i > 30 ? i - 30 : 0, 60);
    } else {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(svg[i])))
        return testing::AssertionFailure() << "text outside the root at " << i;
      ++i;
    }
  }
  if (!root_seen) return testing::AssertionFailure() << "no root element";
  if (!open.empty()) return testing::AssertionFailure() << "<" << open.back() << "> never closed";
  return testing::AssertionSuccess();
}

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t i = haystack.find(needle); i != std::string::npos; i = haystack.find(needle, i + 1)) ++n;
  return n;
}

// "41.1K" -> 41100.
double parse_compact(const std::string& s) {
  size_t used = 0;
  double v = std::stod(s, &used);
  const std::string suffix = s.substr(used);
  if (suffix == "K") v *= 1e3;
  if (suffix == "M") v *= 1e6;
  if (suffix == "B") v *= 1e9;
  if (suffix == "T") v *= 1e12;
  return v;
}

std::vector<ChartBar> zero_stages() {
  return {{"stage 0", "oom", 0, 0, 0},
          {"stage 1", "ok", 41100, 300, 43.5},
          {"stage 2", "ok", 52000, 500, 30.25},
          {"stage 3", "ok", 26000, 0, 12}};
}

TEST(SvgChart, IsAStandaloneWellFormedSvgDocument) {
  std::vector<ChartBar> eight;
  for (int i = 0; i < 8; ++i)
    eight.push_back({"configuration number " + std::to_string(i), "ok", 1000.0 * i, 5, double(i)});
  const std::vector<std::vector<ChartBar>> cases = {{}, {{"stage 0", "oom", 0, 0, 0}}, zero_stages(), eight};
  for (const auto& bars : cases) {
    for (const double capacity : {0.0, 80.0}) {
      const std::string svg = render_comparison_chart("gpt2-xl, 8 GPUs", bars, capacity);
      SCOPED_TRACE(svg);
      EXPECT_EQ(svg.rfind("<svg", 0), 0u);
      EXPECT_NE(svg.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
      EXPECT_EQ(svg.substr(svg.find_last_not_of(" \n") + 1 - 6, 6), "</svg>");
      EXPECT_TRUE(well_formed(svg));
      const auto root = elements(svg, "svg");
      ASSERT_EQ(root.size(), 1u);
      const double width = root[0].number("width"), height = root[0].number("height");
      EXPECT_GT(width, 0);
      EXPECT_GT(height, 0);
      EXPECT_EQ(root[0].attributes.at("viewBox"),
                "0 0 " + root[0].attributes.at("width") + " " + root[0].attributes.at("height"));
      // Everything placed inside the view box.
      for (const char* name : {"rect", "text"})
        for (const Element& e : elements(svg, name)) {
          if (!e.attributes.count("x")) continue;
          EXPECT_GE(e.number("x"), 0) << name;
          EXPECT_LE(e.number("x"), width) << name;
          EXPECT_GE(e.number("y"), 0) << name;
          EXPECT_LE(e.number("y"), height) << name;
        }
    }
  }
}

TEST(SvgChart, EveryRectTextAndLineIsClosed) {
  const std::string svg = render_comparison_chart("t", zero_stages(), 80);
  for (const std::string name : {"rect", "text", "line"}) {
    const size_t opened = count(svg, "<" + name + " ");
    size_t self_closed = 0;
    for (size_t i = svg.find("<" + name + " "); i != std::string::npos; i = svg.find("<" + name + " ", i + 1))
      self_closed += svg[svg.find('>', i) - 1] == '/';
    EXPECT_GT(opened, 0u) << name;
    EXPECT_EQ(opened, self_closed + count(svg, "</" + name + ">")) << name;
  }
}

TEST(SvgChart, OnTheCpuBackendTheMemoryIsTheDevicesPerRank) {
  const std::string gpu = render_comparison_chart("t", zero_stages(), 0);
  EXPECT_NE(gpu.find("GPU peak memory"), std::string::npos);
  EXPECT_NE(gpu.find("GB per GPU"), std::string::npos);
  const std::string cpu = render_comparison_chart("t", zero_stages(), 0, /*on_gpu=*/false);
  EXPECT_NE(cpu.find("device peak memory"), std::string::npos);
  EXPECT_NE(cpu.find("GB per rank"), std::string::npos);
  EXPECT_NE(cpu.find("tokens/s (all ranks)"), std::string::npos);
  EXPECT_EQ(cpu.find("GPU"), std::string::npos);
}

TEST(SvgChart, BarHeightsAreProportionalToTheValues) {
  const auto bars = zero_stages();
  const std::string svg = render_comparison_chart("t", bars, 0);
  const auto throughput = elements(svg, "rect", "bar throughput");
  const auto memory = elements(svg, "rect", "bar memory");
  ASSERT_EQ(throughput.size(), 3u);
  ASSERT_EQ(memory.size(), 3u);
  for (size_t i = 1; i < 3; ++i) {
    // Bars in the order of the configurations; bars[0] failed.
    EXPECT_NEAR(throughput[i].number("height") / throughput[0].number("height"),
                bars[i + 1].tokens_per_second / bars[1].tokens_per_second, 0.01);
    EXPECT_NEAR(memory[i].number("height") / memory[0].number("height"), bars[i + 1].gpu_peak_gb / bars[1].gpu_peak_gb,
                0.01);
    EXPECT_GT(throughput[i].number("x"), throughput[i - 1].number("x"));
  }
  // All from one baseline: the axis starts at 0.
  for (const auto* panel : {&throughput, &memory})
    for (const Element& bar : *panel)
      EXPECT_NEAR(bar.number("y") + bar.number("height"), (*panel)[0].number("y") + (*panel)[0].number("height"), 0.01);
}

TEST(SvgChart, FailedConfigurationHasNoBarButItsStatus) {
  std::vector<ChartBar> bars = zero_stages();
  bars[3].status = "error";
  bars[3].tokens_per_second = 1e9;  // a failed run's numbers are not drawn, nor recommended
  const std::string svg = render_comparison_chart("t", bars, 0);
  EXPECT_EQ(elements(svg, "rect", "bar throughput").size(), 2u);
  EXPECT_EQ(elements(svg, "rect", "bar memory").size(), 2u);
  std::vector<std::string> statuses;
  for (const Element& e : elements(svg, "text", "status")) statuses.push_back(e.text);
  EXPECT_EQ(statuses, (std::vector<std::string>{"OOM", "error", "OOM", "error"}));  // once a panel
  // Where the bar would be: under the failed configuration's label, on the axis.
  const auto labels = elements(svg, "text", "label");
  ASSERT_EQ(labels.size(), 8u);
  const auto status = elements(svg, "text", "status");
  EXPECT_EQ(status[0].number("x"), labels[0].number("x"));
  EXPECT_EQ(status[1].number("x"), labels[3].number("x"));
  EXPECT_EQ(svg.find("1.00B"), std::string::npos);
  ASSERT_EQ(elements(svg, "rect", "bar throughput best").size(), 1u);
  EXPECT_EQ(elements(svg, "rect", "bar throughput best")[0].attributes,
            elements(svg, "rect", "bar throughput")[1].attributes);
  EXPECT_NE(svg.find("recommended: stage 2 (highest throughput)"), std::string::npos);
  EXPECT_LT(parse_compact(elements(svg, "text", "tick throughput").back().text), 1e6);
}

TEST(SvgChart, BestOkBarIsHighlightedAndNamed) {
  const std::string svg = render_comparison_chart("t", zero_stages(), 0);
  const auto best = elements(svg, "rect", "bar throughput best");
  ASSERT_EQ(best.size(), 1u);
  const auto throughput = elements(svg, "rect", "bar throughput");
  EXPECT_EQ(best[0].attributes, throughput[1].attributes);  // stage 2: 52000 tokens/s
  EXPECT_NE(best[0].attributes.at("fill"), throughput[0].attributes.at("fill"));
  const auto best_memory = elements(svg, "rect", "bar memory best");
  ASSERT_EQ(best_memory.size(), 1u);
  EXPECT_EQ(best_memory[0].attributes, elements(svg, "rect", "bar memory")[1].attributes);
  EXPECT_NE(svg.find("recommended: stage 2 (highest throughput)"), std::string::npos);
  EXPECT_EQ(elements(svg, "rect", "swatch best").at(0).attributes.at("fill"), best[0].attributes.at("fill"));
}

TEST(SvgChart, ValuesArePrintedAboveTheBars) {
  const std::vector<ChartBar> bars = {{"a", "ok", 41100, 0, 43.5}, {"b", "ok", 1020000, 0, 0.05},
                                      {"c", "ok", 999600, 0, 7},   {"d", "ok", 512, 0, 0},
                                      {"e", "ok", 9996, 0, 0.5},   {"f", "ok", 99960, 0, 143.26}};
  const std::string svg = render_comparison_chart("t", bars, 0);
  std::vector<std::string> throughput, memory;
  for (const Element& e : elements(svg, "text", "value throughput")) throughput.push_back(e.text);
  for (const Element& e : elements(svg, "text", "value memory")) memory.push_back(e.text);
  EXPECT_EQ(throughput, (std::vector<std::string>{"41.1K", "1.02M", "1.00M", "512", "10.0K", "100K"}));
  EXPECT_EQ(memory, (std::vector<std::string>{"43.5", "0.050", "7.0", "0.0", "0.50", "143.3"}));
  const auto rects = elements(svg, "rect", "bar throughput");
  const auto values = elements(svg, "text", "value throughput");
  for (size_t i = 0; i < rects.size(); ++i) {
    EXPECT_LT(values[i].number("y"), rects[i].number("y"));
    EXPECT_NEAR(values[i].number("x"), rects[i].number("x") + rects[i].number("width") / 2, 0.01);
  }
}

TEST(SvgChart, AxesHaveFourToSixNiceTicksFromZero) {
  for (const double top : {7.0, 0.3, 999.0, 1000.0, 12000.0, 41100.0, 123456.0, 1.02e6, 2.6e9}) {
    SCOPED_TRACE(top);
    const std::string svg = render_comparison_chart("t", {{"a", "ok", top, 0, top / 1000}, {"b", "ok", 0, 0, 0}}, 0);
    for (const char* panel : {"throughput", "memory"}) {
      const double max = panel == std::string("throughput") ? top : top / 1000;
      std::vector<double> ticks;
      for (const Element& e : elements(svg, "text", std::string("tick ") + panel))
        ticks.push_back(parse_compact(e.text));
      ASSERT_GE(ticks.size(), 4u) << panel;
      ASSERT_LE(ticks.size(), 6u) << panel;
      EXPECT_EQ(ticks[0], 0);
      const double step = ticks[1];
      const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
      EXPECT_TRUE(std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 || std::abs(mantissa - 2.5) < 1e-6 ||
                  std::abs(mantissa - 5) < 1e-6)
          << panel << " step " << step;
      for (size_t i = 1; i < ticks.size(); ++i) EXPECT_NEAR(ticks[i], double(i) * step, step * 1e-6) << panel;
      EXPECT_GE(ticks.back(), max * (1 - 1e-9)) << panel;
      EXPECT_LT(ticks[ticks.size() - 2], max) << panel;
      EXPECT_EQ(elements(svg, "line", std::string("grid ") + panel).size(), ticks.size() - 1) << panel;
    }
  }
}

TEST(SvgChart, AxisTopIsTheSmallestNiceOne) {
  for (const auto& [max, expected] : std::vector<std::pair<double, std::string>>{
           {12000, "12.5K"}, {41100, "50K"}, {52300, "60K"}, {7, "8"}, {0.3, "0.3"}, {1.02e6, "1.25M"}}) {
    const std::string svg = render_comparison_chart("t", {{"a", "ok", max, 0, 1}}, 0);
    EXPECT_EQ(elements(svg, "text", "tick throughput").back().text, expected) << max;
  }
}

TEST(SvgChart, ErrorBarOnlyWhereThereIsAStddev) {
  const std::vector<ChartBar> bars = {{"a", "ok", 40000, 4000, 10}, {"b", "ok", 20000, 0, 10}};
  const std::string svg = render_comparison_chart("t", bars, 0);
  const auto lines = elements(svg, "line", "errorbar");
  ASSERT_EQ(lines.size(), 3u);  // one bar: the whisker and two caps
  const Element a = elements(svg, "rect", "bar throughput")[0];
  const double base = a.number("y") + a.number("height"), per_unit = a.number("height") / 40000;
  const double ys[2] = {lines[0].number("y1"), lines[0].number("y2")};
  EXPECT_NEAR(std::min(ys[0], ys[1]), base - 44000 * per_unit, 0.05);
  EXPECT_NEAR(std::max(ys[0], ys[1]), base - 36000 * per_unit, 0.05);
  EXPECT_NEAR(lines[0].number("x1"), a.number("x") + a.number("width") / 2, 0.01);
  EXPECT_NE(svg.find("standard deviation"), std::string::npos);

  const std::string without = render_comparison_chart("t", {{"b", "ok", 20000, 0, 10}}, 0);
  EXPECT_TRUE(elements(without, "line", "errorbar").empty());
  EXPECT_EQ(without.find("standard deviation"), std::string::npos);
}

TEST(SvgChart, EscapesLabelsTitleAndStatus) {
  const std::string nasty = "<script>alert(\"x\")</script> & co";
  const std::vector<ChartBar> bars = {{nasty, "ok", 100, 0, 1}, {"b", "<script>", 0, 0, 0}};
  const std::string svg = render_comparison_chart(nasty, bars, 0);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("\"x\""), std::string::npos);
  EXPECT_NE(svg.find("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co"), std::string::npos);  // title
  EXPECT_NE(svg.find("&lt;script&gt;"), std::string::npos);
  EXPECT_TRUE(well_formed(svg)) << svg;
  // What XML cannot hold at all does not reach the document either.
  const std::string bytes = render_comparison_chart(std::string("a\x01\xff\xc3", 4) + "b", bars, 0);
  EXPECT_TRUE(well_formed(bytes));
  EXPECT_EQ(bytes.find('\x01'), std::string::npos);
  EXPECT_EQ(bytes.find('\xff'), std::string::npos);
  EXPECT_NE(bytes.find("a???b"), std::string::npos);
  // Characters outside ASCII pass through whole.
  EXPECT_NE(render_comparison_chart("Modèle \u00e9t\u00e9", bars, 0).find("Modèle \u00e9t\u00e9"), std::string::npos);
}

TEST(SvgChart, LongLabelsAreCutAndManyAreRotated) {
  std::vector<ChartBar> bars;
  for (int i = 0; i < 8; ++i)
    bars.push_back({"meta-llama/Llama-2-70b-hf cpu_optimizer " + std::to_string(i), "ok", 1000.0 + i, 0, 1});
  const std::string svg = render_comparison_chart("t", bars, 0);
  const auto labels = elements(svg, "text", "label");
  ASSERT_EQ(labels.size(), 16u);
  for (const Element& label : labels) {
    EXPECT_NE(label.attributes.at("transform").find("rotate("), std::string::npos);
    EXPECT_LE(label.text.size(), 22u + 2);  // the ellipsis is 3 bytes, one code point
    EXPECT_NE(label.text.find("\u2026"), std::string::npos);
  }
  EXPECT_NE(svg.find("<title>meta-llama/Llama-2-70b-hf cpu_optimizer 7</title>"), std::string::npos);

  // Short labels stand upright.
  for (const Element& label : elements(render_comparison_chart("t", zero_stages(), 0), "text", "label"))
    EXPECT_EQ(label.attributes.count("transform"), 0u) << label.text;
}

TEST(SvgChart, NonFiniteInputsDrawAsZero) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<ChartBar> bars = {
      {"a", "ok", nan, nan, nan}, {"b", "ok", inf, -inf, inf}, {"c", "ok", -5, 3, -1}, {"d", "ok", 100, 10, 2}};
  for (const double capacity : {nan, inf, -inf, -1.0}) {
    const std::string svg = render_comparison_chart("t", bars, capacity);
    std::string lower = svg;
    for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_EQ(lower.find("nan"), std::string::npos) << svg;
    EXPECT_EQ(lower.find("inf"), std::string::npos) << svg;
    EXPECT_TRUE(well_formed(svg));
    EXPECT_TRUE(elements(svg, "line", "capacity").empty());
    const auto throughput = elements(svg, "rect", "bar throughput");
    ASSERT_EQ(throughput.size(), 4u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(throughput[i].number("height"), 0) << i;
    EXPECT_GT(throughput[3].number("height"), 0);
    EXPECT_TRUE(throughput[3].has_class("best"));
  }
}

TEST(SvgChart, CapacityLineOnlyWithACapacity) {
  const std::string without = render_comparison_chart("t", zero_stages(), 0);
  EXPECT_TRUE(elements(without, "line", "capacity").empty());
  EXPECT_EQ(without.find("GPU memory "), std::string::npos);

  const std::string svg = render_comparison_chart("t", zero_stages(), 80);
  const auto capacity = elements(svg, "line", "capacity");
  ASSERT_EQ(capacity.size(), 1u);
  EXPECT_EQ(capacity[0].number("y1"), capacity[0].number("y2"));
  EXPECT_NE(capacity[0].attributes.at("stroke-dasharray"), "");
  EXPECT_NE(svg.find(">GPU memory 80 GB<"), std::string::npos);
  // The memory axis reaches the capacity, and the line sits at 80 / 43.5 of the tallest bar.
  const auto ticks = elements(svg, "text", "tick memory");
  EXPECT_GE(std::stod(ticks.back().text), 80);
  const Element tallest = elements(svg, "rect", "bar memory")[0];
  const double base = tallest.number("y") + tallest.number("height");
  EXPECT_NEAR((base - capacity[0].number("y1")) / tallest.number("height"), 80 / 43.5, 0.01);
  EXPECT_NE(render_comparison_chart("t", zero_stages(), 79.6).find(">GPU memory 79.6 GB<"), std::string::npos);
}

TEST(SvgChart, EmptyOrAllFailedSaysNoConfigurationSucceeded) {
  for (const auto& bars :
       {std::vector<ChartBar>{}, std::vector<ChartBar>{{"stage 0", "oom", 0, 0, 0}, {"stage 1", "error", 5, 0, 3}}}) {
    const std::string svg = render_comparison_chart("gpt2", bars, 80);
    EXPECT_TRUE(well_formed(svg)) << svg;
    EXPECT_NE(svg.find("no configuration succeeded"), std::string::npos) << svg;
    EXPECT_TRUE(elements(svg, "rect", "bar").empty());
    EXPECT_EQ(svg.find("recommended"), std::string::npos);
  }
  EXPECT_EQ(render_comparison_chart("gpt2", zero_stages(), 80).find("no configuration succeeded"), std::string::npos);
}

TEST(SvgChart, OutputIsDeterministic) {
  EXPECT_EQ(render_comparison_chart("t", zero_stages(), 80), render_comparison_chart("t", zero_stages(), 80));
}

}  // namespace
}  // namespace zb
