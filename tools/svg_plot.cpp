// tools/svg_plot.cpp: the SVG line plot (contract in svg_plot.hpp).
#include "tools/svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tools/cli_common.hpp"

namespace fb::cli {
namespace {

// "Nice" tick spacing (1, 2 or 5 times a power of ten) giving about `count` ticks.
double tick_step(double span, int count) {
  if (!(span > 0)) return 1.0;
  const double raw = span / count;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10.0 * p;
}

// Tick labels as people write them: integers in full (1000, not 1e+03), other values with
// up to 4 significant digits (exponent form only for very small or large magnitudes).
std::string num(double v) {
  char buf[40];
  if (std::fabs(v) < 1e-300) v = 0.0;
  if (v == std::floor(v) && std::fabs(v) < 1e12)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::size_t non_finite_points(const LinePlot& plot) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < plot.xs.size() && i < plot.ys.size(); ++i)
    n += !std::isfinite(plot.xs[i]) || !std::isfinite(plot.ys[i]);
  return n;
}

void write_line_plot(const std::string& path, const LinePlot& plot) {
  // Non-finite points cannot be drawn: they are left out (the caller is told how many).
  LinePlot p = plot;
  p.xs.clear();
  p.ys.clear();
  for (std::size_t i = 0; i < plot.xs.size() && i < plot.ys.size(); ++i) {
    if (!std::isfinite(plot.xs[i]) || !std::isfinite(plot.ys[i])) continue;
    p.xs.push_back(plot.xs[i]);
    p.ys.push_back(plot.ys[i]);
  }
  const double width = 900, height = 520, left = 100, right = 30, top = 50, bottom = 70;
  double x0 = 0, x1 = 1, y0 = 0, y1 = 0;
  if (!p.xs.empty()) {
    x0 = *std::min_element(p.xs.begin(), p.xs.end());
    x1 = *std::max_element(p.xs.begin(), p.xs.end());
  }
  for (double y : p.ys) {
    y0 = std::min(y0, y);
    y1 = std::max(y1, y);
  }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad;
  y1 += pad;
  const double pw = width - left - right, ph = height - top - bottom;
  auto sx = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto sy = [&](double y) { return top + (y1 - y) / (y1 - y0) * ph; };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"13\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << width / 2 << "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">" << escape(p.title)
    << "</text>\n";
  // grid and ticks
  const double xs = tick_step(x1 - x0, 8), ys = tick_step(y1 - y0, 6);
  for (double t = std::ceil(x0 / xs) * xs; t <= x1 + 1e-9 * xs; t += xs) {
    s << "<line x1=\"" << sx(t) << "\" y1=\"" << top << "\" x2=\"" << sx(t) << "\" y2=\"" << top + ph
      << "\" stroke=\"#e4e4e4\"/>\n";
    s << "<text x=\"" << sx(t) << "\" y=\"" << top + ph + 18 << "\" text-anchor=\"middle\">" << num(t) << "</text>\n";
  }
  for (double t = std::ceil(y0 / ys) * ys; t <= y1 + 1e-9 * ys; t += ys) {
    s << "<line x1=\"" << left << "\" y1=\"" << sy(t) << "\" x2=\"" << left + pw << "\" y2=\"" << sy(t)
      << "\" stroke=\"#e4e4e4\"/>\n";
    s << "<text x=\"" << left - 6 << "\" y=\"" << sy(t) + 4 << "\" text-anchor=\"end\">" << num(t) << "</text>\n";
  }
  if (y0 < 0 && y1 > 0)
    s << "<line x1=\"" << left << "\" y1=\"" << sy(0) << "\" x2=\"" << left + pw << "\" y2=\"" << sy(0)
      << "\" stroke=\"#888\"/>\n";
  for (double m : p.markers)
    s << "<line x1=\"" << sx(m) << "\" y1=\"" << top << "\" x2=\"" << sx(m) << "\" y2=\"" << top + ph
      << "\" stroke=\"#d62728\" stroke-dasharray=\"4,3\" stroke-width=\"1.2\"/>\n";
  s << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.8\" points=\"";
  for (std::size_t i = 0; i < p.xs.size() && i < p.ys.size(); ++i) s << sx(p.xs[i]) << "," << sy(p.ys[i]) << " ";
  s << "\"/>\n";
  s << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"black\"/>\n";
  s << "<text x=\"" << left + pw / 2 << "\" y=\"" << height - 22 << "\" text-anchor=\"middle\">" << escape(p.x_label)
    << "</text>\n";
  s << "<text transform=\"translate(24," << top + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << escape(p.y_label) << "</text>\n";
  // legend
  // Top-left unless the curve mostly lives in the upper half: then bottom-left.
  double mean_y = 0;
  for (double y : p.ys) mean_y += y;
  if (!p.ys.empty()) mean_y /= static_cast<double>(p.ys.size());
  const bool legend_low = sy(mean_y) < top + ph / 2;
  // Left unless a marker (the P-bar == 1 keys, often the first keys) lies under it: then right.
  const double legend_width = 330;
  bool marker_on_left = false;
  for (double m : p.markers) marker_on_left |= sx(m) < left + legend_width + 24;
  const double lx = marker_on_left ? left + pw - legend_width - 6 : left + 12;
  const double ly = legend_low ? top + ph - 38 : top + 14;
  s << "<rect x=\"" << lx - 6 << "\" y=\"" << ly - 12 << "\" width=\"" << legend_width
    << "\" height=\"44\" fill=\"white\" stroke=\"#aaa\"/>\n";
  s << "<line x1=\"" << lx << "\" y1=\"" << ly << "\" x2=\"" << lx + 28 << "\" y2=\"" << ly
    << "\" stroke=\"#1f77b4\" stroke-width=\"2\"/>\n";
  s << "<text x=\"" << lx + 36 << "\" y=\"" << ly + 4 << "\">" << escape(p.series_label) << "</text>\n";
  s << "<line x1=\"" << lx << "\" y1=\"" << ly + 20 << "\" x2=\"" << lx + 28 << "\" y2=\"" << ly + 20
    << "\" stroke=\"#d62728\" stroke-dasharray=\"4,3\"/>\n";
  s << "<text x=\"" << lx + 36 << "\" y=\"" << ly + 24 << "\">" << escape(p.marker_label) << "</text>\n";
  s << "</svg>\n";
  write_output_file(path, s.str(), "the plot");
}

}  // namespace fb::cli
