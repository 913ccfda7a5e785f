#include "profile/profiler.h"

#include <algorithm>

#include <fmt/format.h>

#include "util/file_system.h"
#include "util/name_table.h"

namespace crucible::profile {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

constexpr std::array<Phase, kPhaseCount> kPhases = {Phase::kBatch,        Phase::kDataloaderNext,
                                                    Phase::kTrainBatch,   Phase::kBackward,
                                                    Phase::kGradientSync, Phase::kStepOptimizer};

}  // namespace

const char* name_of(Phase phase) {
  static const util::NameTable<Phase> names{{Phase::kBatch, "batch"},
                                            {Phase::kDataloaderNext, "dataloader_next"},
                                            {Phase::kTrainBatch, "train_batch"},
                                            {Phase::kBackward, "backward"},
                                            {Phase::kGradientSync, "gradient_sync"},
                                            {Phase::kStepOptimizer, "step_optimizer"}};
  return names.name(phase);
}

Profiler::Profiler(const ProfilingConfig& config, torch::Device device,
                   const DistributedContext& dist, std::string trace_file,
                   std::function<void(const std::string&)> warn)
    : config_(config),
      device_(device),
      dist_(dist),
      trace_file_(std::move(trace_file)),
      warn_(std::move(warn)) {}

Profiler::~Profiler() {
  try {
    finish();
  } catch (const std::exception&) {
    // A trace is a diagnostic: losing it must not hide the error that ended the run.
  }
}

void Profiler::begin_batch(int64_t batch_idx) {
  batch_idx_ = batch_idx;
  active_ = config_.profiles(batch_idx);
  if (active_ && dist_.is_chief()) {
    if (!period_counters_) period_counters_ = read_system_counters();
    if (config_.trace && !trace_ && !trace_ended_) {
      util::create_directories(util::parent_path(trace_file_));
      trace_ = std::make_unique<OperatorTrace>(trace_file_, batch_idx);
    }
    if (trace_) trace_->set_recording(true);
  }
  batch_scope_.emplace(at::RecordScope::USER_SCOPE);
  if (batch_scope_->isActive()) {
    batch_scope_->before(kBatchRange, c10::ArrayRef<const c10::IValue>{});
  }
  if (!active_) return;
  sync();
  batch_started_ = std::chrono::steady_clock::now();
}

void Profiler::end_batch() {
  if (!active_) {
    batch_scope_.reset();
    return;
  }
  sync();
  add(Phase::kBatch, seconds_since(batch_started_));
  batch_scope_.reset();
  if (trace_) trace_->set_recording(false);
  if (period_counters_ && !config_.profiles(batch_idx_ + 1)) {
    period_end_counters_ = read_system_counters();
  }
  ++period_.batches;
  ++total_.batches;
  if (first_profiled_ < 0) first_profiled_ = batch_idx_;
  last_profiled_ = batch_idx_;
  active_ = false;
  if (batch_idx_ == config_.end_after_batch) finish();
}

void Profiler::add(Phase phase, double seconds) {
  period_.seconds[static_cast<size_t>(phase)] += seconds;
  total_.seconds[static_cast<size_t>(phase)] += seconds;
}

void Profiler::sync() const {
  if (config_.sync_timings && device_.is_cuda()) torch::cuda::synchronize(device_.index());
}

MetricValues Profiler::take_period() {
  if (period_.batches == 0) return {};
  std::array<double, kPhaseCount> mean_ms{};
  for (size_t i = 0; i < kPhaseCount; ++i) {
    mean_ms[i] = 1000 * period_.seconds[i] / static_cast<double>(period_.batches);
  }
  MetricValues out;
  std::array<double, kPhaseCount> ranks_mean = mean_ms;
  if (dist_.distributed()) {
    const auto all = dist_.allgather(
        torch::tensor(std::vector<double>(mean_ms.begin(), mean_ms.end()), torch::kFloat64));
    const torch::Tensor stacked = torch::stack(all);
    const torch::Tensor mean = stacked.mean(0);
    for (size_t i = 0; i < kPhaseCount; ++i) ranks_mean[i] = mean[i].item<double>();
    out["batch_ms_slowest_rank"] =
        stacked.select(1, static_cast<int64_t>(Phase::kBatch)).max().item<double>();
  }
  for (Phase phase : kPhases) {
    const double ms = ranks_mean[static_cast<size_t>(phase)];
    if (ms > 0) out[fmt::format("{}_ms", name_of(phase))] = ms;
  }
  if (period_counters_) {
    const SystemCounters end =
        period_end_counters_ ? *period_end_counters_ : read_system_counters();
    for (const auto& [name, value] : system_usage(*period_counters_, end)) out[name] = value;
  }
  period_ = PhaseTimes();
  period_counters_.reset();
  period_end_counters_.reset();
  return out;
}

std::string Profiler::summary() const {
  if (total_.batches == 0) return "";
  const double batch = total_.seconds[static_cast<size_t>(Phase::kBatch)];
  std::string text =
      fmt::format("  profile of batches {}..{} on this process ({} batches):", first_profiled_,
                  last_profiled_, total_.batches);
  for (Phase phase : kPhases) {
    const double seconds = total_.seconds[static_cast<size_t>(phase)];
    if (phase != Phase::kBatch && seconds == 0) continue;
    text += fmt::format(" {} {:.3g} ms", name_of(phase),
                        1000 * seconds / static_cast<double>(total_.batches));
    if (phase != Phase::kBatch && batch > 0)
      text += fmt::format(" ({:.0f}%)", 100 * seconds / batch);
    text += phase == kPhases.back() ? "" : ",";
  }
  if (trace_written_) text += "\n  operator trace: " + trace_file_;
  return text;
}

void Profiler::finish() {
  batch_scope_.reset();
  if (!trace_) return;
  const std::unique_ptr<OperatorTrace> trace = std::move(trace_);
  trace_ended_ = true;
  try {
    trace->write(warn_);
    trace_written_ = true;
  } catch (const std::exception& e) {
    warn_(fmt::format("the operator trace is lost, training goes on: {}", e.what()));
  }
}

ScopedPhase::ScopedPhase(Profiler* profiler, Phase phase)
    : profiler_(profiler != nullptr && profiler->active() ? profiler : nullptr),
      phase_(phase),
      scope_(at::RecordScope::USER_SCOPE) {
  if (scope_.isActive()) {
    scope_.before(std::string("crucible::") + name_of(phase), c10::ArrayRef<const c10::IValue>{});
  }
  if (profiler_) started_ = std::chrono::steady_clock::now();
}

ScopedPhase::~ScopedPhase() {
  if (!profiler_) return;
  try {
    profiler_->sync();
  } catch (const std::exception&) {
    // A device error surfaces at the next operation; the timing ends here regardless.
  }
  profiler_->add(phase_, seconds_since(started_));
}

}  // namespace crucible::profile
