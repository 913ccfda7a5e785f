#include "metrics/reducer.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <ATen/Dispatch.h>
#include <fmt/format.h>

#include <crucible/errors.h>

#include "util/utf8.h"

namespace crucible::metrics {
namespace {

template <class Map>
std::string key_list(const Map& m) {
  std::string out;
  for (const auto& [k, v] : m) out += (out.empty() ? "" : ", ") + k;
  return "{" + out + "}";
}

// Throws TrainingError naming `where` and the batch (`batch_idx` < 0: a method of no batch) when
// metric name `name` is empty or not UTF-8 (it goes into the log, metrics.jsonl and
// TensorBoard). Called when a name is first seen, not every batch.
void check_name(const std::string& name, const char* where, int64_t batch_idx) {
  const std::string at = batch_idx >= 0 ? fmt::format(" at batch {}", batch_idx) : "";
  if (name.empty()) {
    throw TrainingError(fmt::format(
        "{} returned a metric with an empty name{}; name it (the log, metrics.jsonl and "
        "TensorBoard show it by its name)",
        where, at));
  }
  if (const auto bad = util::first_invalid_utf8(name)) {
    throw TrainingError(
        fmt::format("{} returned a metric{} whose name is not UTF-8 text (byte 0x{:02X} at offset "
                    "{}); names go into metrics.jsonl and TensorBoard, which take UTF-8",
                    where, at, static_cast<unsigned char>(name[*bad]), *bad));
  }
}

// `t` itself when no one else can change it before it is read: the caller's is the only handle
// and nothing else views its storage (a result made for this batch). Else a copy on its device
// (no host sync): a running counter the trial keeps and returns each batch, or a view that would
// keep a larger tensor alive.
torch::Tensor owned(const torch::Tensor& t) {
  const bool alone = t.use_count() == 1 && t.storage().use_count() == 1 &&
                     t.storage().nbytes() == static_cast<size_t>(t.element_size());
  return alone ? t.detach() : t.detach().clone();
}

// `batch_idx` < 0: a method of no batch (evaluate_full_dataset).
void check_scalar(const std::string& name, const torch::Tensor& t, const char* where,
                  int64_t batch_idx) {
  if (!t.defined() || t.numel() != 1) {
    throw TrainingError(fmt::format(
        "{} returned metric '{}'{} with {} elements; a metric must be a one-element tensor", where,
        name, batch_idx >= 0 ? fmt::format(" at batch {}", batch_idx) : "",
        t.defined() ? t.numel() : 0));
  }
}

torch::Tensor scalar_of(const std::string& name, const torch::Tensor& t, const char* where,
                        int64_t batch_idx) {
  check_scalar(name, t, where, batch_idx);
  return t.detach().reshape({}).to(torch::kDouble);
}

// The value of one-element strided CPU tensor `t`, converted to double as to(kDouble) would,
// read in place (no tensor operation).
double read_cpu_value(const torch::Tensor& t) {
  double v = 0;
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, t.scalar_type(), "read_cpu_value",
                             [&] { v = static_cast<double>(*t.data_ptr<scalar_t>()); });
  return v;
}

// The one-element tensors `values` as doubles, in order: CPU ones read in place, the others
// gathered on their device and copied to the host at once.
std::vector<double> to_host_doubles(const std::vector<torch::Tensor>& values) {
  std::vector<double> out(values.size());
  std::vector<torch::Tensor> elsewhere;
  std::vector<size_t> where;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].is_cpu()) {
      out[i] = read_cpu_value(values[i]);
    } else {
      elsewhere.push_back(values[i].reshape({1}));
      where.push_back(i);
    }
  }
  if (elsewhere.empty()) return out;
  const bool alike = std::all_of(elsewhere.begin(), elsewhere.end(), [&](const torch::Tensor& t) {
    return t.device() == elsewhere.front().device() && t.dtype() == elsewhere.front().dtype();
  });
  if (!alike) {
    for (size_t k = 0; k < elsewhere.size(); ++k) {
      out[where[k]] = elsewhere[k].to(torch::kCPU, torch::kDouble).item<double>();
    }
    return out;
  }
  const torch::Tensor host = torch::cat(elsewhere).to(torch::kCPU, torch::kDouble);
  for (size_t k = 0; k < where.size(); ++k) out[where[k]] = host.data_ptr<double>()[k];
  return out;
}

// NaN wins, whichever side it is on, as torch::maximum and torch::minimum have it.
double max_of(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double min_of(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }
torch::Tensor max_of(const torch::Tensor& a, const torch::Tensor& b) {
  return torch::maximum(a, b);
}
torch::Tensor min_of(const torch::Tensor& a, const torch::Tensor& b) {
  return torch::minimum(a, b);
}

// Two partial results of one metric (sums for AVG and SUM, extremes for MAX and MIN) as one.
template <class T>
T combine(ReduceOp reducer, const T& a, const T& b) {
  switch (reducer) {
    case ReduceOp::kAvg:
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kMax:
      return max_of(a, b);
    case ReduceOp::kMin:
      return min_of(a, b);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown ReduceOp ", static_cast<int>(reducer));
}

}  // namespace

void ValidationAccumulator::add(const Metrics& batch_metrics, int64_t batch_length,
                                int64_t batch_idx) {
  if (batches_ > 0) {
    bool same = batch_metrics.size() == acc_.size();
    for (const auto& [k, v] : batch_metrics) same = same && acc_.count(k);
    if (!same) {
      throw TrainingError(fmt::format(
          "evaluate_batch returned keys {} at validation batch {}, but {} at batch 0; every batch "
          "must report the same metrics",
          key_list(batch_metrics), batch_idx, key_list(acc_)));
    }
  }
  for (const auto& [name, tensor] : batch_metrics) {
    torch::Tensor v = scalar_of(name, tensor, "evaluate_batch", batch_idx);
    const ReduceOp r = reducer_.for_metric(name);
    if (r == ReduceOp::kAvg) v = v * static_cast<double>(batch_length);
    auto it = acc_.find(name);
    if (it == acc_.end()) {
      check_name(name, "evaluate_batch", batch_idx);
      acc_.emplace(name, r == ReduceOp::kAvg ? v : v.clone());  // not the trial's own tensor
      continue;
    }
    it->second = combine(r, it->second, v);
  }
  records_ += batch_length;
  ++batches_;
}

MetricValues ValidationAccumulator::result() const {
  MetricValues out;
  for (const auto& [name, tensor] : acc_) {
    double v = tensor.item<double>();
    if (reducer_.for_metric(name) == ReduceOp::kAvg) {
      v = records_ > 0 ? v / static_cast<double>(records_) : 0.0;
    }
    out[name] = v;
  }
  return out;
}

nlohmann::json ValidationAccumulator::partial() const {
  nlohmann::json sums = nlohmann::json::object();
  for (const auto& [name, tensor] : acc_) sums[name] = tensor.item<double>();
  return {{"records", records_}, {"batches", batches_}, {"sums", sums}};
}

MetricValues combine_partials(const std::vector<nlohmann::json>& partials,
                              const EvaluationReducer& reducer) {
  MetricValues combined;
  int64_t records = 0;
  int first = -1;
  for (size_t r = 0; r < partials.size(); ++r) {
    const auto& p = partials[r];
    if (p.at("batches").get<int64_t>() == 0) continue;
    const auto& sums = p.at("sums");
    if (first < 0) {
      first = static_cast<int>(r);
    } else {
      bool same = sums.size() == partials[static_cast<size_t>(first)].at("sums").size();
      for (const auto& [k, v] : sums.items()) same = same && combined.count(k);
      if (!same) {
        throw TrainingError(fmt::format(
            "ranks report different validation metrics: rank {} reports {}, rank {} reports {}; "
            "every rank must report the same metrics",
            first, partials[static_cast<size_t>(first)].at("sums").dump(), r, sums.dump()));
      }
    }
    records += p.at("records").get<int64_t>();
    for (const auto& [name, value] : sums.items()) {
      const double v = value.get<double>();
      auto it = combined.find(name);
      if (it == combined.end()) {
        combined[name] = v;
        continue;
      }
      it->second = combine(reducer.for_metric(name), it->second, v);
    }
  }
  for (auto& [name, v] : combined) {
    if (reducer.for_metric(name) == ReduceOp::kAvg) {
      v = records > 0 ? v / static_cast<double>(records) : 0.0;
    }
  }
  return combined;
}

MetricValues across_ranks(const DistributedContext& dist, const TrainingAccumulator& training) {
  if (!dist.distributed()) return training.peek();
  std::map<std::string, std::pair<double, int64_t>> sums;
  std::map<std::string, double> counts;
  const auto all = dist.allgather_object(training.partials());
  for (const auto& rank : all) {
    for (const auto& [name, sum_count] : rank.at("sums").items()) {
      auto& [sum, n] = sums[name];
      sum += sum_count.at(0).get<double>();
      n += sum_count.at(1).get<int64_t>();
    }
    for (const auto& [name, n] : rank.at("counts").items()) {
      counts[name] += n.get<double>() / static_cast<double>(all.size());
    }
  }
  MetricValues out;
  for (const auto& [name, sum_count] : sums) {
    out[name] = sum_count.first / static_cast<double>(sum_count.second);
  }
  for (const auto& [name, n] : counts) out[name] = n;
  return out;
}

void TrainingAccumulator::add(const Metrics& batch_metrics, int64_t batch_idx) {
  for (const auto& [name, tensor] : batch_metrics) {
    check_scalar(name, tensor, "train_batch", batch_idx);
    auto entry = sums_.find(name);
    if (entry == sums_.end()) {
      check_name(name, "train_batch", batch_idx);
      entry = sums_.emplace(name, Entry()).first;
    }
    Entry& e = entry->second;
    e.pending.push_back(owned(tensor));
    e.pending_batches.push_back(batch_idx);
    ++e.count;
  }
  ++batches_;
}

void TrainingAccumulator::sum_pending(Entry& e) const {
  if (e.pending.empty()) return;
  const std::vector<double> values = to_host_doubles(e.pending);
  for (size_t i = 0; i < values.size(); ++i) {
    double v = values[i];
    if (skip_non_finite_) {
      const bool finite = std::isfinite(v);
      if (!finite) v = 0.0;
      e.finite += finite ? 1 : 0;
    } else if (!std::isfinite(v) && e.first_non_finite < 0) {
      e.first_non_finite = e.pending_batches[i];
    }
    e.sum = e.sum ? *e.sum + v : v;
  }
  e.pending.clear();
  e.pending_batches.clear();
}

void TrainingAccumulator::sum_all_pending() const {
  for (auto& [name, e] : sums_) sum_pending(e);
}

MetricValues TrainingAccumulator::peek() const {
  sum_all_pending();
  MetricValues out;
  for (const auto& [name, e] : sums_) {
    const int64_t n = skip_non_finite_ ? e.finite : e.count;
    out[name] = e.sum.value_or(0.0) / static_cast<double>(n);
  }
  for (const auto& [name, n] : counts_) out[name] = static_cast<double>(n);
  return out;
}

nlohmann::json TrainingAccumulator::partials() const {
  sum_all_pending();
  nlohmann::json sums = nlohmann::json::object();
  for (const auto& [name, e] : sums_) {
    sums[name] = {e.sum.value_or(0.0), skip_non_finite_ ? e.finite : e.count};
  }
  return {{"sums", sums}, {"counts", counts_}};
}

int64_t TrainingAccumulator::first_non_finite(const std::string& name) const {
  const auto it = sums_.find(name);
  if (it == sums_.end()) return -1;
  sum_pending(it->second);
  return it->second.first_non_finite;
}

MetricValues TrainingAccumulator::flush() {
  MetricValues out = peek();
  reset();
  return out;
}

void TrainingAccumulator::reset() {
  sums_.clear();
  counts_.clear();
  batches_ = 0;
}

nlohmann::json TrainingAccumulator::state() const {
  sum_all_pending();
  nlohmann::json sums = nlohmann::json::object();
  for (const auto& [name, e] : sums_) {
    sums[name] = {{"sum", e.sum.value_or(0.0)},
                  {"count", e.count},
                  {"finite", skip_non_finite_ ? e.finite : e.count}};
  }
  return {{"batches", batches_}, {"sums", sums}, {"counts", counts_}};
}

void TrainingAccumulator::restore(const nlohmann::json& state) {
  reset();
  batches_ = state.value("batches", int64_t{0});
  counts_ = state.value("counts", std::map<std::string, int64_t>());
  const nlohmann::json sums = state.value("sums", nlohmann::json::object());
  for (const auto& [name, saved] : sums.items()) {
    // Checkpoints before the non-finite policy wrote [sum, count].
    const bool pair = saved.is_array();
    Entry& e = sums_[name];
    e.sum = (pair ? saved.at(0) : saved.at("sum")).get<double>();
    e.count = (pair ? saved.at(1) : saved.at("count")).get<int64_t>();
    e.finite = pair ? e.count : saved.at("finite").get<int64_t>();
  }
}

MetricValues to_values(const Metrics& metrics, const std::string& where) {
  MetricValues out;
  for (const auto& [name, tensor] : metrics) {
    check_name(name, where.c_str(), -1);
    out[name] = scalar_of(name, tensor, where.c_str(), -1).item<double>();
  }
  return out;
}

}  // namespace crucible::metrics
