// The pieces of a report page: escaping, axis ticks, and charts as SVG, read back by the same
// reader as the end-to-end tests (read_report.py, which parses the page as XML).
#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

#include "catch.h"
#include "process.h"
#include "report/chart.h"
#include "report/html.h"

using namespace crucible::testing;
using namespace crucible::report;

namespace {

// Writes `body` as a page and reads it back with read_report.py; fails the test when the page is
// not well-formed XML.
nlohmann::json read_back(const std::string& body) {
  TempDir tmp;
  write_file(tmp / "page.html", page("a test", body));
  const auto r = run_command(kPython + " " + std::string(CRUCIBLE_SOURCE_DIR) +
                             "/tests/report/read_report.py " + (tmp / "page.html") + " 2>&1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.output);
}

bool round_step(double step) {
  const double magnitude = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double norm = step / magnitude;
  return std::abs(norm - 1) < 1e-6 || std::abs(norm - 2) < 1e-6 || std::abs(norm - 5) < 1e-6 ||
         std::abs(norm - 10) < 1e-6;
}

}  // namespace

TEST_CASE("escape makes any text safe as element text and attribute value", "[report]") {
  CHECK(escape("a<b&\"c\"'d>") == "a&lt;b&amp;&quot;c&quot;&#39;d&gt;");
  CHECK(escape(std::string("tab\there\nline\x01") + "\x1f") == "tab\there\nline\\u0001\\u001f");
  CHECK(escape("grüße") == "grüße");
  CHECK(escape("a\r\n") == "a\r\n");  // XML allows a carriage return
  // Bytes that are not UTF-8 (a Latin-1 description, say) become U+FFFD.
  CHECK(escape("caf\xe9 <\xff\xfe>") == "caf\xef\xbf\xbd &lt;\xef\xbf\xbd\xef\xbf\xbd&gt;");
  CHECK(escape("\xe2\x82") == "\xef\xbf\xbd\xef\xbf\xbd");  // cut off by the end
  const auto back = read_back(element("pre", escape("</pre><script>x & y</script>\x02 caf\xe9")));
  CHECK(back["pre"][0] == "</pre><script>x & y</script>\\u0002 caf\xef\xbf\xbd");
}

TEST_CASE("links are percent-encoded paths that no browser reads as a scheme", "[report]") {
  CHECK(url_path("trials/3/report.html") == "trials/3/report.html");
  CHECK(url_path("../runs/a b#1?/x%y.html") == "../runs/a%20b%231%3F/x%25y.html");
  CHECK(url_path("c:d/e") == "./c%3Ad/e");
  CHECK(url_path("a/b:c") == "a/b%3Ac");
  CHECK(url_path("grü") == "gr%C3%BC");
}

TEST_CASE("number_text gives 6 significant digits and names what is not finite", "[report]") {
  CHECK(number_text(0.123456789) == "0.123457");
  CHECK(number_text(1234567.0) == "1.23457e+06");
  CHECK(number_text(std::nan("")) == "nan");
  CHECK(number_text(-INFINITY) == "-inf");
  CHECK(number_text(std::optional<double>()) == "-");
  CHECK(count_text(1234567) == "1234567");
  CHECK(count_text(1.53125) == "1.53125");
  CHECK(count_text(1e20) == "1e+20");
}

TEST_CASE("linear ticks are round steps that cover the range", "[report]") {
  const auto t = linear_ticks(0, 1);
  REQUIRE(t.size() == 6);
  for (size_t i = 0; i < t.size(); ++i) CHECK(t[i] == Approx(0.2 * static_cast<double>(i)));
  const auto around_zero = linear_ticks(-0.3, 0.3);
  CHECK(std::count(around_zero.begin(), around_zero.end(), 0.0) == 1);  // exactly 0, not 1e-17
  const auto flat = linear_ticks(3, 3);
  CHECK(flat.front() < 3);
  CHECK(flat.back() > 3);

  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exponent(-8, 8), unit(-1, 1);
  for (int i = 0; i < 2000; ++i) {
    const double scale = std::pow(10.0, exponent(rng));
    double lo = unit(rng) * scale, hi = unit(rng) * scale;
    if (lo > hi) std::swap(lo, hi);
    const auto ticks = linear_ticks(lo, hi);
    INFO(lo << " .. " << hi);
    REQUIRE(ticks.size() >= 2);
    CHECK(ticks.size() <= 12);
    CHECK(ticks.front() <= lo);
    CHECK(ticks.back() >= hi);
    CHECK(round_step(ticks[1] - ticks[0]));
  }
}

TEST_CASE("log ticks are powers of ten, with 2 and 5 between over a short range", "[report]") {
  CHECK(log_ticks(0.01, 10) == std::vector<double>{0.01, 0.1, 1, 10});
  CHECK(log_ticks(1, 5) == std::vector<double>{1, 2, 5, 10});
  const auto wide = log_ticks(1e-30, 1e30);
  CHECK(wide.front() <= 1e-30);
  CHECK(wide.back() >= 1e30);
  CHECK(wide.size() <= 10);
}

TEST_CASE("a chart draws each series' points with tooltips and breaks lines at gaps", "[report]") {
  Chart chart;
  chart.title = "loss <per batch>";
  chart.x_label = "batches";
  chart.y_label = "loss";
  chart.series.push_back({"training", {{1, 0.5, ""}, {2, NAN, ""}, {3, 0.25, ""}, {4, 0.2, ""}}});
  chart.series.push_back({"validation & co", {{2, 0.4, "the best"}, {4, INFINITY, ""}}});
  const auto back = read_back(svg_chart(chart));
  REQUIRE(back["charts"].size() == 1);
  const auto& c = back["charts"][0];
  CHECK(c["title"] == "loss <per batch>");
  CHECK(c["series"]["training"].size() == 3);
  CHECK(c["series"]["training"][2]["x"] == 4.0);
  CHECK(c["series"]["training"][2]["y"] == 0.2);
  // The NaN at 2 splits the line: 1 alone draws no line, 3..4 do.
  CHECK(c["polylines"]["training"] == 1);
  CHECK(c["series"]["validation & co"].size() == 1);
  CHECK(c["series"]["validation & co"][0]["note"] == "the best");
  CHECK(c["left_out"] == "2 values not drawn: not finite or beyond 1e300");
}

TEST_CASE("a chart's y axis turns logarithmic over two decades, and empty charts say so",
          "[report]") {
  Chart chart;
  chart.title = "loss";
  chart.series.push_back({"training", {{0, 100, ""}, {1, 10, ""}, {2, 1, ""}}});
  // On a logarithmic axis 10 lies halfway between 100 and 1; on a linear one it would not.
  const std::string svg = svg_chart(chart);
  std::vector<double> ys;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) {
    const size_t cy = svg.find("cy=\"", at) + 4;
    ys.push_back(std::stod(svg.substr(cy, svg.find('"', cy) - cy)));
  }
  REQUIRE(ys.size() == 3);
  CHECK(ys[1] - ys[0] == Approx(ys[2] - ys[1]).margin(0.2));

  Chart empty;
  empty.title = "nothing";
  empty.series.push_back({"training", {{0, NAN, ""}}});
  CHECK(svg_chart(empty).find("no values to draw") != std::string::npos);
  CHECK(read_back(svg_chart(empty))["charts"][0]["left_out"] ==
        "1 value not drawn: not finite or beyond 1e300");
}

TEST_CASE("a table marks its best row and escapes nothing twice", "[report]") {
  Table t;
  t.header = {"name", "value"};
  t.rows = {{escape("a<b"), "1"}, {hyperlink("x y.html", "b&c"), "2"}};
  t.marked = {false, true};
  const auto back = read_back(table(t) + facts({{"what", escape("x \"quoted\"")}}));
  REQUIRE(back["tables"].size() == 1);
  CHECK(back["tables"][0]["rows"][0][0] == "a<b");
  CHECK(back["tables"][0]["rows"][1][0] == "b&c");
  CHECK(back["tables"][0]["links"][1][0] == "x%20y.html");
  CHECK(back["tables"][0]["marked"] == nlohmann::json::array({1}));
  CHECK(back["facts"]["what"] == "x \"quoted\"");
  CHECK(back["title"] == "a test");
}
