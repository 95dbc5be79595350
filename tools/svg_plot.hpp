// tools/svg_plot.hpp: a small, dependency-free SVG line plot for `flashbits replay --plot`
// (cumulative rounding error of O-bar along the key index, P-bar == 1 keys marked, in the
// style of Qiu & Yao's Fig. 6).
//
// Contract: write_line_plot() writes one standalone SVG (axes with ticks and numbers, axis
// labels, title, legend) of the series (x, y) drawn in the given order, with a dashed
// vertical line at every marker x, whole or not at all (cli_common.hpp write_output_file).
// Points with a non-finite x or y are left out (count them with non_finite_points() to warn).
// Tick labels print integers in full. The legend sits where no marker line runs under it.
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
// How many of plot's points write_line_plot leaves out (non-finite x or y).
std::size_t non_finite_points(const LinePlot& plot);

}  // namespace fb::cli
