// A JSON file a program was given, read whole: a file that cannot be read or is not JSON is bad input.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace zb {

// Throws UsageError "<source>: cannot be read" or "<source>: not JSON (<parser's message>)", source naming the
// flag and the path ("--profile p.json").
nlohmann::json read_json_file(const std::string& path, const std::string& source);

}  // namespace zb
