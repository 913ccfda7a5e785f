#pragma once

// A metric's value in Crucible's JSON files (metrics.jsonl, experiment.jsonl, a checkpoint's
// metadata.json, a scheduler's state). JSON has no NaN or infinities, so NaN is written as null
// and an infinity as the string "inf" or "-inf"; every other value as a number.

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace crucible::util {

// `value` in that form.
nlohmann::json number_json(double value);
// Each value in that form, under its name.
nlohmann::json numbers_json(const std::map<std::string, double>& values);
// The value number_json wrote: NaN for null, an infinity for "inf" or "-inf", a number's value;
// nullopt for anything else.
std::optional<double> number_from_json(const nlohmann::json& value);
// Each member of `object` read by number_from_json, NaN where that gives none; empty when
// `object` is no object.
std::map<std::string, double> numbers_from_json(const nlohmann::json& object);

}  // namespace crucible::util
