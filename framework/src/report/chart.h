#pragma once

// Charts of a report as inline SVG: lines of metrics over training, and scatters of a metric
// against a hyperparameter. Static, with a tooltip (an SVG <title>) on every marker.

#include <string>
#include <vector>

namespace crucible::report {

struct ChartPoint {
  double x = 0;
  double y = 0;
  std::string note;  // added to the point's tooltip ("checkpoint batch-0000000064", "stop")
};

struct ChartSeries {
  std::string name;
  std::vector<ChartPoint> points;  // drawn in this order
  bool lines = true;               // joined by a line; false: markers only
  bool emphasized = false;         // drawn last and thicker; the others fade
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<ChartSeries> series;
  bool log_x = false;  // a logarithmic x axis (needs positive x; others are not drawn)
  int width = 460;
};

// `chart` as an <svg> element: axes with round-number ticks, one colour per series, a legend
// (unless there is one series, named as the chart or a scatter), a marker per point when a series
// has at most 100 points (always for a scatter), each marker's tooltip naming its series, x, y and
// note. A point whose x or y cannot be drawn (not finite, beyond 1e300 in size, or below 1e-300 on
// a logarithmic axis) is left out, breaks its line, and is counted in a note under the chart. The
// y axis is logarithmic when every drawn y is positive and the largest is at least 100 times the
// smallest. When any point is drawn, each series is a <g class="series" data-name="NAME"> holding
// its <polyline>s and <circle>s.
std::string svg_chart(const Chart& chart);

// About `count` round tick values (1, 2 or 5 times a power of ten apart) from a multiple of the
// step at or below `lo` to one at or above `hi`. Requires lo <= hi, both finite; lo == hi gives
// ticks around that value.
std::vector<double> linear_ticks(double lo, double hi, int count = 5);

// Ticks of a logarithmic axis from the power of ten at or below `lo` to the one at or above
// `hi`: every power of ten, with 2 and 5 times each when that gives fewer than 4 ticks.
// Requires 0 < lo <= hi, both finite.
std::vector<double> log_ticks(double lo, double hi);

}  // namespace crucible::report
