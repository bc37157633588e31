// What the project's SVG pictures (bench/svg_chart.h, bench/profile_timeline.h) write the same way: text that XML
// can hold, numbers that do not depend on the locale, text widths guessed without font metrics, axis steps a
// person reads easily, and the few elements every picture has. Everything here is deterministic, so that the same
// input gives the same bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace zb {

// `value` with `decimals` decimals, "C" locale style; never "-0".
std::string svg_fixed(double value, int decimals);
// A coordinate: two decimals, trailing zeros dropped to keep documents small ("12.5", "3", never "-0").
std::string svg_coord(double value);

// Text content or attribute value: the XML specials escaped, and what XML 1.0 cannot hold at all (control
// characters, malformed UTF-8) replaced by '?'.
std::string escape_xml(std::string_view text);
// Code points of UTF-8 text (a malformed byte counts as one).
size_t utf8_code_points(std::string_view text);
// At most `limit` code points, cut on a character boundary, with an ellipsis where something was cut.
std::string shorten_text(std::string_view text, size_t limit);
// A rough width in pixels: 0.6 em a code point, which errs wide for sans-serif, the safe side.
double estimated_text_width(std::string_view text, double font_size);

// An axis from 0 to intervals * step, with step one of 1, 2, 2.5, 5 x 10^exponent.
struct NiceAxis {
  double mantissa = 1;
  int exponent = 0;
  int intervals = 5;
  double step() const;
  double top() const { return intervals * step(); }
  // The decimals a tick value needs when written in units of 10^unit_exponent (2.5 x 10^e needs one more than e
  // says).
  int decimals(int unit_exponent = 0) const;
};
// The smallest such step that covers max_value (<= 0: 1) in at most max_intervals intervals. The step before it
// needed more, and steps grow by at most 2.5x, so this one needs more than max_intervals / 2.5.
NiceAxis nice_axis(double max_value, int max_intervals);

// The opening of a standalone document: the root with its size and view box, its <title> and a white background.
// The caller closes it with "</svg>\n".
std::string open_svg_document(double width, double height, const std::string& title);
// The document's heading: <text class="title">, bold, `title` escaped here.
void append_svg_title(std::string& out, double x, double y, double font_size, const std::string& title);
// <text class=cls x y extra>content</text>; `content` must already be escaped.
void append_svg_text(std::string& out, std::string_view cls, double x, double y, std::string_view content,
                     std::string_view extra_attributes = "");
void append_svg_line(std::string& out, std::string_view cls, double x1, double y1, double x2, double y2,
                     std::string_view stroke, std::string_view extra_attributes = "");

}  // namespace zb
