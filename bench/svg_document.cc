#include "bench/svg_document.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace zb {
namespace {

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

void append_extra(std::string& out, std::string_view extra_attributes) {
  if (extra_attributes.empty()) return;
  out += ' ';
  out += extra_attributes;
}

}  // namespace

std::string svg_fixed(double value, int decimals) {
  if (value == 0) value = 0;  // -0.0 would print as "-0"
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string svg_coord(double value) {
  std::string s = svg_fixed(value, 2);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string escape_xml(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_sequence_length(text, i);
    if (n == 0) {
      out += '?';
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    const char c = text[i++];
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

size_t utf8_code_points(std::string_view text) {
  size_t n = 0;
  for (size_t i = 0; i < text.size(); i += std::max<size_t>(1, utf8_sequence_length(text, i))) ++n;
  return n;
}

std::string shorten_text(std::string_view text, size_t limit) {
  if (utf8_code_points(text) <= limit) return std::string(text);
  size_t i = 0;
  for (size_t n = 0; n + 1 < limit; ++n) i += std::max<size_t>(1, utf8_sequence_length(text, i));
  return std::string(text.substr(0, i)) + "\u2026";
}

double estimated_text_width(std::string_view text, double font_size) {
  return double(utf8_code_points(text)) * 0.6 * font_size;
}

double NiceAxis::step() const {
  return mantissa * std::pow(10.0, exponent);
}

int NiceAxis::decimals(int unit_exponent) const {
  return std::max(0, unit_exponent - exponent + (mantissa == 2.5 ? 1 : 0));
}

NiceAxis nice_axis(double max_value, int max_intervals) {
  if (!(max_value > 0)) max_value = 1;
  max_intervals = std::max(1, max_intervals);
  // A decade below max_value / max_intervals: every step tried there needs more than max_intervals.
  for (int exponent = int(std::floor(std::log10(max_value / max_intervals))) - 1;; ++exponent) {
    for (const double mantissa : {1.0, 2.0, 2.5, 5.0}) {
      const double step = mantissa * std::pow(10.0, exponent);
      // The tolerance keeps 0.3 / 0.1 = 2.9999999999999996 at 3 intervals.
      const int intervals = std::max(1, int(std::ceil(max_value / step * (1 - 1e-9))));
      if (intervals <= max_intervals) return {mantissa, exponent, intervals};
    }
  }
}

std::string open_svg_document(double width, double height, const std::string& title) {
  const std::string w = svg_coord(std::ceil(width)), h = svg_coord(std::ceil(height));
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + w + "\" height=\"" + h + "\" viewBox=\"0 0 " + w + " " +
         h + "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n<title>" + escape_xml(title) +
         "</title>\n<rect class=\"background\" x=\"0\" y=\"0\" width=\"" + w + "\" height=\"" + h +
         "\" fill=\"white\"/>\n";
}

void append_svg_title(std::string& out, double x, double y, double font_size, const std::string& title) {
  append_svg_text(out, "title", x, y, escape_xml(title),
                  "font-size=\"" + svg_coord(font_size) + "\" font-weight=\"bold\"");
}

void append_svg_text(std::string& out, std::string_view cls, double x, double y, std::string_view content,
                     std::string_view extra_attributes) {
  out += "<text class=\"";
  out += cls;
  out += "\" x=\"" + svg_coord(x) + "\" y=\"" + svg_coord(y) + "\"";
  append_extra(out, extra_attributes);
  out += '>';
  out += content;
  out += "</text>\n";
}

void append_svg_line(std::string& out, std::string_view cls, double x1, double y1, double x2, double y2,
                     std::string_view stroke, std::string_view extra_attributes) {
  out += "<line class=\"";
  out += cls;
  out += "\" x1=\"" + svg_coord(x1) + "\" y1=\"" + svg_coord(y1) + "\" x2=\"" + svg_coord(x2) + "\" y2=\"" +
         svg_coord(y2) + "\" stroke=\"";
  out += stroke;
  out += '"';
  append_extra(out, extra_attributes);
  out += "/>\n";
}

}  // namespace zb
