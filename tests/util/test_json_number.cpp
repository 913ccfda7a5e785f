// A metric's value in Crucible's JSON files: NaN as null, infinities as "inf" / "-inf"; and as
// text.
#include "catch.h"

#include <cmath>
#include <limits>

#include "util/json_number.h"
#include "util/number_text.h"

using crucible::util::number_from_json;
using crucible::util::number_json;

TEST_CASE("metric values round-trip through JSON text, NaN and infinities included", "[util]") {
  const double inf = std::numeric_limits<double>::infinity();
  for (const double value : {0.0, -2.5, 1e300, 4.9e-324, inf, -inf}) {
    const nlohmann::json read = nlohmann::json::parse(number_json(value).dump());
    REQUIRE(number_from_json(read).has_value());
    CHECK(*number_from_json(read) == value);
  }
  CHECK(number_json(inf) == "inf");
  CHECK(number_json(-inf) == "-inf");
  CHECK(number_json(std::nan("")).is_null());
  CHECK(std::isnan(number_from_json(nlohmann::json::parse("null")).value()));
  CHECK(number_from_json(7) == 7.0);
  // Nothing else is a metric.
  for (const char* text : {R"("nan")", R"("Infinity")", R"("1.5")", "true", "[1]", "{}"}) {
    INFO(text);
    CHECK_FALSE(number_from_json(nlohmann::json::parse(text)).has_value());
  }
  const auto values = crucible::util::numbers_from_json(
      nlohmann::json::parse(R"({"a": 1, "b": "-inf", "c": null, "d": "x"})"));
  CHECK(values.at("a") == 1.0);
  CHECK(values.at("b") == -inf);
  CHECK(std::isnan(values.at("c")));
  CHECK(std::isnan(values.at("d")));
  CHECK(crucible::util::numbers_from_json(nlohmann::json::array()).empty());
}

TEST_CASE("number_text writes a NaN as nan whatever its sign bit, and infinities with theirs",
          "[util]") {
  const double negative_nan = -std::numeric_limits<double>::quiet_NaN();
  REQUIRE(std::signbit(negative_nan));  // fmt writes it "-nan"
  CHECK(crucible::util::number_text(negative_nan, 5) == "nan");
  CHECK(crucible::util::number_text(std::nan(""), 5) == "nan");
  CHECK(crucible::util::number_text(std::numeric_limits<double>::infinity(), 5) == "inf");
  CHECK(crucible::util::number_text(-std::numeric_limits<double>::infinity(), 5) == "-inf");
  CHECK(crucible::util::number_text(0.123456789, 5) == "0.12346");
  CHECK(crucible::util::number_text(1234567.0, 6) == "1.23457e+06");
}
