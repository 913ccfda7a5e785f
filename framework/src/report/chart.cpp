#include "report/chart.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "report/html.h"

namespace crucible::report {
namespace {

constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr size_t kMarkersUpTo = 100;  // points in a line series that still get markers
constexpr int kPlotHeight = 200;
constexpr int kLeft = 70, kRight = 16, kTop = 30;

// One axis: its ticks and the mapping from values to pixels.
struct Axis {
  bool log = false;
  std::vector<double> ticks;
  double from = 0, to = 0;  // pixels of ticks.front() and ticks.back()

  double scaled(double v) const { return log ? std::log10(v) : v; }
  double pixel(double v) const {
    const double lo = scaled(ticks.front()), hi = scaled(ticks.back());
    if (!(hi > lo) || !std::isfinite(hi - lo)) return (from + to) / 2;  // too close to tell apart
    return from + (scaled(v) - lo) / (hi - lo) * (to - from);
  }
};

Axis make_axis(const std::vector<double>& values, bool log, double from, double to, int count) {
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  Axis a;
  a.log = log;
  a.ticks = log ? log_ticks(*lo, *hi) : linear_ticks(*lo, *hi, count);
  a.from = from;
  a.to = to;
  return a;
}

// Whether `v` can be placed on an axis: finite and within 1e300 (so that tick arithmetic stays
// finite), and on a logarithmic axis at least 1e-300.
bool drawable(double v, bool log) { return std::abs(v) <= 1e300 && (!log || v >= 1e-300); }

std::string px(double v) { return fmt::format("{:.1f}", v); }

std::string tick_text(double v) { return fmt::format("{:g}", v); }

}  // namespace

std::vector<double> linear_ticks(double lo, double hi, int count) {
  if (lo == hi) {
    const double half = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= half;
    hi += half;
  }
  const double raw = (hi / count) - (lo / count);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  const double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * magnitude;
  if (!std::isfinite(step) || step <= 0) return {lo, hi};
  const double first = std::floor(lo / step), last = std::ceil(hi / step);
  if (last - first > 100) return {lo, hi};  // steps too fine for doubles this large
  std::vector<double> ticks;
  for (double k = first; k <= last; ++k) {
    const double v = k * step;
    ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  if (ticks.size() < 2) ticks = {lo, hi};
  return ticks;
}

std::vector<double> log_ticks(double lo, double hi) {
  const double e0 = std::floor(std::log10(lo));
  double e1 = std::ceil(std::log10(hi));
  if (e1 <= e0) e1 = e0 + 1;
  const double every = std::max(1.0, std::ceil((e1 - e0) / 8));
  std::vector<double> ticks;
  for (double e = e0; e <= e1; e += every) ticks.push_back(std::pow(10.0, e));
  if (ticks.back() < std::pow(10.0, e1)) ticks.push_back(std::pow(10.0, e0 + every * ticks.size()));
  if (ticks.size() < 4) {
    std::vector<double> finer;
    for (size_t i = 0; i + 1 < ticks.size(); ++i) {
      finer.insert(finer.end(), {ticks[i], 2 * ticks[i], 5 * ticks[i]});
    }
    finer.push_back(ticks.back());
    ticks = std::move(finer);
  }
  return ticks;
}

std::string svg_chart(const Chart& chart) {
  const int width = chart.width;
  const double left = kLeft, right = width - kRight, top = kTop, bottom = kTop + kPlotHeight;

  // The drawable points of each series, split into runs at the points left out.
  struct Drawn {
    std::vector<std::vector<const ChartPoint*>> runs;
  };
  std::vector<Drawn> drawn(chart.series.size());
  std::vector<double> xs, ys;
  size_t left_out = 0;
  for (size_t s = 0; s < chart.series.size(); ++s) {
    drawn[s].runs.emplace_back();
    for (const ChartPoint& p : chart.series[s].points) {
      if (!drawable(p.x, chart.log_x) || !drawable(p.y, false)) {
        ++left_out;
        if (!drawn[s].runs.back().empty()) drawn[s].runs.emplace_back();
        continue;
      }
      drawn[s].runs.back().push_back(&p);
      xs.push_back(p.x);
      ys.push_back(p.y);
    }
  }

  // The legend: entries laid out in rows under the x axis label.
  struct Entry {
    double x, y;
    size_t series;
  };
  std::vector<Entry> legend;
  double legend_bottom = bottom + 44;
  if (chart.series.size() > 1 ||
      (chart.series.size() == 1 && chart.series[0].lines && chart.series[0].name != chart.title)) {
    double x = left;
    double y = bottom + 62;
    for (size_t s = 0; s < chart.series.size(); ++s) {
      const double w = 30 + 7.0 * static_cast<double>(chart.series[s].name.size());
      if (x + w > width - 8 && x > left) {
        x = left;
        y += 18;
      }
      legend.push_back({x, y, s});
      x += w;
    }
    legend_bottom = y + 10;
  }
  const double height = legend_bottom + (left_out > 0 ? 22 : 6);

  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" role=\"img\">",
      width, px(height), width, px(height));
  out += element("title", escape(chart.title));
  out += fmt::format(
      "<text x=\"{}\" y=\"18\" font-size=\"13\" font-weight=\"600\" fill=\"#1d2433\">{}</text>",
      px(left), escape(chart.title));
  out += fmt::format(
      "<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\" fill=\"#5a6478\">{}</text>",
      px((left + right) / 2), px(bottom + 34), escape(chart.x_label));
  out += fmt::format(
      "<text x=\"14\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\" fill=\"#5a6478\" "
      "transform=\"rotate(-90 14 {})\">{}</text>",
      px((top + bottom) / 2), px((top + bottom) / 2), escape(chart.y_label));
  out += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#c9ced9\"/>",
      px(left), px(top), px(right - left), px(bottom - top));

  if (xs.empty()) {
    out += fmt::format(
        "<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\" fill=\"#8a93a6\">"
        "no values to draw</text>",
        px((left + right) / 2), px((top + bottom) / 2));
  } else {
    const auto [y_lo, y_hi] = std::minmax_element(ys.begin(), ys.end());
    const bool log_y = *y_lo > 0 && *y_hi >= 100 * *y_lo;
    const Axis x_axis = make_axis(xs, chart.log_x, left, right, std::max(2, width / 90));
    const Axis y_axis = make_axis(ys, log_y, bottom, top, 5);
    for (const double t : x_axis.ticks) {
      const double x = x_axis.pixel(t);
      out += fmt::format(
          "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#c9ced9\"/>"
          "<text x=\"{0}\" y=\"{3}\" font-size=\"10\" text-anchor=\"middle\" fill=\"#5a6478\">"
          "{4}</text>",
          px(x), px(bottom), px(bottom + 4), px(bottom + 16), tick_text(t));
    }
    for (const double t : y_axis.ticks) {
      const double y = y_axis.pixel(t);
      out += fmt::format(
          "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#eef0f4\"/>"
          "<text x=\"{3}\" y=\"{4}\" font-size=\"10\" text-anchor=\"end\" fill=\"#5a6478\">"
          "{5}</text>",
          px(left), px(y), px(right), px(left - 5), px(y + 3), tick_text(t));
    }
    const bool any_emphasized = std::any_of(chart.series.begin(), chart.series.end(),
                                            [](const ChartSeries& s) { return s.emphasized; });
    std::vector<size_t> order(chart.series.size());
    for (size_t s = 0; s < order.size(); ++s) order[s] = s;
    std::stable_partition(order.begin(), order.end(),
                          [&](size_t s) { return !chart.series[s].emphasized; });
    for (const size_t s : order) {
      const ChartSeries& series = chart.series[s];
      const char* colour = kPalette[s % std::size(kPalette)];
      const bool faded = any_emphasized && !series.emphasized;
      out += fmt::format("<g class=\"series\" data-name=\"{}\"{}>", escape(series.name),
                         faded ? " opacity=\"0.45\"" : "");
      if (series.lines) {
        for (const auto& run : drawn[s].runs) {
          if (run.size() < 2) continue;
          std::string points;
          for (const ChartPoint* p : run) {
            points +=
                (points.empty() ? "" : " ") + px(x_axis.pixel(p->x)) + "," + px(y_axis.pixel(p->y));
          }
          out += fmt::format(
              "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\">{}"
              "</polyline>",
              points, colour, series.emphasized ? 3 : 1.5, element("title", escape(series.name)));
        }
      }
      if (!series.lines || series.points.size() <= kMarkersUpTo) {
        for (const auto& run : drawn[s].runs) {
          for (const ChartPoint* p : run) {
            const std::string tip = fmt::format("{}: {} {}, {} {}{}", series.name, chart.x_label,
                                                count_text(p->x), chart.y_label, number_text(p->y),
                                                p->note.empty() ? "" : "; " + p->note);
            out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\">{}</circle>",
                               px(x_axis.pixel(p->x)), px(y_axis.pixel(p->y)),
                               series.emphasized ? 4 : 2.5, colour, element("title", escape(tip)));
          }
        }
      }
      out += "</g>";
    }
  }
  for (const Entry& e : legend) {
    out += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"4\" fill=\"{}\"/>"
        "<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#1d2433\">{}</text>",
        px(e.x), px(e.y - 5), kPalette[e.series % std::size(kPalette)], px(e.x + 18), px(e.y),
        escape(chart.series[e.series].name));
  }
  if (left_out > 0) {
    out += fmt::format(
        "<text class=\"left-out\" x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#b0413e\">{} {} not "
        "drawn: not finite or beyond 1e300{}</text>",
        px(left), px(height - 8), left_out, left_out == 1 ? "value" : "values",
        chart.log_x ? ", or below 1e-300 on the logarithmic axis" : "");
  }
  return out + "</svg>";
}

}  // namespace crucible::report
