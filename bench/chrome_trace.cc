#include "bench/chrome_trace.h"

#include <zlib.h>

#include <cstdio>
#include <filesystem>

#include "bench/profile_summary.h"
#include "core/errors.h"

namespace zb {

namespace {

// Device streams' tracks after the host threads' (Chrome traces number tracks within a process).
constexpr int64_t kFirstStreamTrack = 1'000'000;

int64_t track_of(const TraceLane& lane) { return lane.device ? kFirstStreamTrack + lane.id : lane.id; }

std::string lane_name(const ProfileWindow& window, const TraceLane& lane) {
  const auto it = window.lane_names.find(lane);
  if (it != window.lane_names.end()) return it->second;
  return (lane.device ? "stream " : "thread ") + std::to_string(lane.id);
}

nlohmann::json metadata(const char* what, int pid, int64_t tid, const nlohmann::json& args) {
  nlohmann::json m = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", args}};
  if (tid >= 0) m["tid"] = tid;
  return m;
}

}  // namespace

nlohmann::json chrome_trace(const ProfileWindow& window) {
  nlohmann::json events = nlohmann::json::array();
  const int pid = window.rank;
  events.push_back(metadata("process_name", pid, -1, {{"name", "rank " + std::to_string(window.rank)}}));
  events.push_back(metadata("process_sort_index", pid, -1, {{"sort_index", window.rank}}));
  const std::vector<TraceLane> lanes = ordered_lanes(window);
  for (size_t i = 0; i < lanes.size(); ++i) {
    events.push_back(metadata("thread_name", pid, track_of(lanes[i]), {{"name", lane_name(window, lanes[i])}}));
    events.push_back(metadata("thread_sort_index", pid, track_of(lanes[i]), {{"sort_index", int64_t(i)}}));
  }
  for (const TraceSlice& s : window.slices) {
    const double duration_us = double(s.end_ns - s.start_ns) / 1e3;
    nlohmann::json args = nlohmann::json::object();
    if (s.bytes > 0) args["bytes"] = s.bytes;
    if (s.flops > 0) args["flops"] = s.flops;
    if (!s.detail.empty()) args["detail"] = s.detail;
    if (s.id != 0) args["id"] = s.id;
    if (s.launched_by != 0) args["launched_by"] = s.launched_by;
    const std::optional<ExposedCategory> busy = busy_category(s, window.ops_run_on_host);
    if (busy && duration_us > 0 && s.bytes > 0) {
      if (*busy == ExposedCategory::copies) args["GB/s"] = s.bytes / (duration_us * 1e3);
      const double factor = bus_bandwidth_factor(s.name, window.world);
      if (*busy == ExposedCategory::collectives && factor > 0)
        args["bus GB/s"] = s.bytes * factor / (duration_us * 1e3);
    }
    events.push_back({{"name", s.name},
                      {"cat", trace_category_name(s.category)},
                      {"ph", "X"},
                      {"pid", pid},
                      {"tid", track_of(s.lane)},
                      {"ts", double(s.start_ns) / 1e3},
                      {"dur", duration_us},
                      {"args", args}});
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"configuration", window.config}, {"rank", window.rank}, {"world", window.world},
                         {"device", window.device_name}}}};
}

void write_gzip_file(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  gzFile file = gzopen(temporary.c_str(), "wb6");
  if (!file) throw IoError("cannot create " + temporary + " (the trace " + path + ")");
  const bool written = text.empty() || gzwrite(file, text.data(), unsigned(text.size())) == int(text.size());
  if (gzclose(file) != Z_OK || !written) {
    std::remove(temporary.c_str());
    throw IoError("cannot write the trace " + path);
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) throw IoError("cannot rename " + temporary + " to " + path + ": " + error.message());
}

std::string read_gzip_file(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) throw IoError("cannot open " + path);
  std::string text;
  char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(file, buffer, sizeof buffer)) > 0) text.append(buffer, size_t(n));
  gzclose(file);
  if (n < 0) throw IoError("cannot read " + path);
  return text;
}

}  // namespace zb
