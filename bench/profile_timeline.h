// A picture of one profiled step (or any range of a window) as a timeline of its lanes, for a person to open in a
// browser beside the summary and the Chrome trace: written with the project's own SVG code (bench/svg_document.h),
// deterministic, and small enough for a step of tens of thousands of kernels.
#pragma once

#include <cstdint>
#include <string>

#include "bench/profile_window.h"

namespace zb {

// An SVG document (standalone: xmlns, width, height, viewBox) of the slices of `window` between begin_ns and
// end_ns. The same arguments give the same bytes.
//
// - Lanes: one per host thread, then one per device stream, each by id, that has a drawn slice in the range (steps
//   are not drawn, so a lane with only a step has none); named on the left with window.lane_names, else
//   "thread N" / "stream N". Each lane is a <g class="lane host"> or <g class="lane device"> holding its name and
//   its slices; its extent is the rect class="lane-background" of the same rank (filled with the idle colour).
// - A time axis in ms from begin_ns with nice ticks (1, 2, 2.5 or 5 x 10^n, at most 10 intervals) under the lanes;
//   the plot spans the axis line (class="axis") from begin_ns to end_ns.
// - Slices, clipped to the range, are rects with class="slice <trace_category_name>" and a <title>: name,
//   duration in ms and, where set, bytes and detail. Busy ones (busy_category with window.ops_run_on_host) are
//   filled with exposed_category_colour over the lane's working height; host op and collective slices of a GPU
//   (launches) are outlined in the colour of what they launch; waits are hatched; units are bars along the top
//   edge of their lane, above the working height, named where the name fits; steps are not drawn (the title and
//   the subtitle name them).
// - Runs of slices narrower than half a pixel, of one category on one lane, each within half a pixel of the last
//   and spanning at most 2 px, become one rect (class "slice <category> merged", fill-opacity the busy fraction
//   of its span, at least 0.3); a note (class="note") says how many slices were merged into how many rects.
//   Every rect is at least half a pixel wide and lies within the plot.
// - A legend (class="swatch <name>") of the six exposed categories, idle included, and of the other styles drawn.
// An empty range, or one without drawn slices, gives a document with the title and a message saying so.
std::string render_timeline_svg(const std::string& title, const ProfileWindow& window, int64_t begin_ns,
                                int64_t end_ns);

}  // namespace zb
