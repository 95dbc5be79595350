// tools/svg_plot.hpp: a small, dependency-free SVG line plot for `flashbits replay --plot`
// (cumulative rounding error of O-bar along the key index, P-bar == 1 keys marked, in the
// style of Qiu & Yao's Fig. 6).
//
// Contract: write_line_plot() writes one standalone SVG (axes with ticks and numbers, axis
// labels, title, legend) of the series (x, y) drawn in the given order, with a dashed
// vertical line at every marker x, whole or not at all (cli_common.hpp write_output_file).
// Throws InputError when the file cannot be written.
#pragma once

#include <string>
#include <vector>

namespace fb::cli {

struct LinePlot {
  std::string title, x_label, y_label, series_label, marker_label;
  std::vector<double> xs, ys;
  std::vector<double> markers;
};

void write_line_plot(const std::string& path, const LinePlot& plot);

}  // namespace fb::cli
