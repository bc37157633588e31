// The comparison chart of the benchmark suites (zero_bench: ZeRO stages 0-3; offload_bench: none, cpu_optimizer,
// cpu_full, nvme), written beside their JSON/CSV results for a person to open in a browser. No chart library is
// at hand in C++, so the SVG is written as text; it is deterministic (no timestamps, locale-independent numbers)
// so that two runs with the same results give the same file.
#pragma once

#include <string>
#include <vector>

namespace zb {

// One configuration of a comparison, as measured.
struct ChartBar {
  std::string label;                    // "stage 2", "cpu_optimizer", ...
  std::string status;                   // "ok", "oom", "error" (anything not "ok" has no bars)
  double tokens_per_second = 0;         // all GPUs together
  double tokens_per_second_stddev = 0;  // over repeats (0: draw no error bar)
  double gpu_peak_gb = 0;               // per GPU
};

// An SVG document (standalone, with xmlns, width/height and a viewBox) of two side-by-side panels:
// throughput (tokens/s) per configuration and GPU peak memory (GB) per configuration. A failed
// configuration gets no bar but its status written where the bar would be ("OOM", "error").
// gpu_capacity_gb > 0 draws a dashed horizontal line at the GPU's memory on the memory panel (and the
// memory axis extends to include it), labelled "GPU memory X GB".
//
// The "ok" configuration with the highest throughput is the recommended one: its bars are drawn in a distinct
// colour and the legend names it. Empty `bars`, or none "ok", still give a valid document, which says "no
// configuration succeeded". Labels and title are escaped (they come from user input such as model names);
// non-finite or negative values count as 0. Bar rects carry class="bar throughput" or class="bar memory" (plus
// "best" on the recommended one), so that tools and tests can find them. on_gpu false (the CPU backend) names
// the memory "device peak memory", per rank, and the throughput that of all ranks.
std::string render_comparison_chart(const std::string& title, const std::vector<ChartBar>& bars,
                                    double gpu_capacity_gb, bool on_gpu = true);

}  // namespace zb
