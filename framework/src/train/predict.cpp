#include <crucible/trainer.h>

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/tensor_files.h"
#include "train/eval_mode.h"
#include "train/run_start.h"
#include "train/session.h"
#include "util/crash_report.h"
#include "util/file_io.h"

namespace crucible {
namespace {

// What this rank tells the others of its predictions: the rows of each of its batches, and the
// dtype and trailing shape of its rows (null when it has no batch), or the error of a batch whose
// rows differ from its first batch's.
nlohmann::json describe(const std::vector<torch::Tensor>& rows, int64_t rank, int64_t world) {
  nlohmann::json counts = nlohmann::json::array();
  for (const auto& t : rows) counts.push_back(t.size(0));
  nlohmann::json d = {{"rows", counts}, {"shape", nullptr}, {"dtype", nullptr}};
  if (rows.empty()) return d;
  const torch::Tensor& first = rows.front();
  d["shape"] = first.sizes().slice(1).vec();
  d["dtype"] = static_cast<int>(first.scalar_type());
  for (size_t k = 1; k < rows.size(); ++k) {
    if (rows[k].sizes().slice(1) != first.sizes().slice(1) ||
        rows[k].scalar_type() != first.scalar_type()) {
      d["error"] = fmt::format(
          "predict_batch returned rows of shape {} and dtype {} for batch {} but of shape {} "
          "and dtype {} for batch {}; every batch's rows must agree",
          c10::str(rows[k].sizes().slice(1)), c10::toString(rows[k].scalar_type()),
          static_cast<int64_t>(k) * world + rank, c10::str(first.sizes().slice(1)),
          c10::toString(first.scalar_type()), rank);
      break;
    }
  }
  return d;
}

// Every rank's predictions, on every rank, in the order of their global batch indices: rank r's
// k-th output is batch k * size + r. Throws TrainingError on every rank when there is none, or
// when batches' rows differ in dtype or trailing shape.
torch::Tensor gather_in_order(const DistributedContext& dist,
                              const std::vector<torch::Tensor>& outputs) {
  std::vector<torch::Tensor> rows;
  for (const auto& t : outputs) rows.push_back(t.dim() == 0 ? t.reshape({1}) : t);
  const std::vector<nlohmann::json> all =
      dist.allgather_object(describe(rows, dist.rank(), dist.size()));
  int64_t first = -1;
  for (int64_t r = 0; r < dist.size(); ++r) {
    if (all[r].contains("error")) throw TrainingError(all[r]["error"].get<std::string>());
    if (all[r]["shape"].is_null()) continue;
    if (first < 0) {
      first = r;
    } else if (all[r]["shape"] != all[first]["shape"] || all[r]["dtype"] != all[first]["dtype"]) {
      throw TrainingError(fmt::format(
          "predict_batch returned rows of shape {} on rank {} but of shape {} on rank {} (or "
          "another dtype); every batch's rows must agree",
          all[r]["shape"].dump(), r, all[first]["shape"].dump(), first));
    }
  }
  if (first < 0) throw TrainingError("build_predict_data_loader yielded no batch to predict");
  if (dist.size() == 1) return torch::cat(rows, 0);
  std::vector<int64_t> shape = all[first]["shape"].get<std::vector<int64_t>>();
  const auto dtype = static_cast<torch::ScalarType>(all[first]["dtype"].get<int>());
  int64_t longest = 0;
  for (const auto& d : all) {
    int64_t n = 0;
    for (const auto& b : d["rows"]) n += b.get<int64_t>();
    longest = std::max(longest, n);
  }
  shape.insert(shape.begin(), longest);
  // Padded to the longest rank's rows, since allgather takes one shape from every rank, and sent
  // as bytes, which every backend carries whatever the dtype.
  torch::Tensor padded = torch::zeros(shape, torch::TensorOptions().dtype(dtype));
  if (!rows.empty()) {
    const torch::Tensor mine = torch::cat(rows, 0);
    padded.narrow(0, 0, mine.size(0)).copy_(mine);
  }
  const std::vector<torch::Tensor> gathered =
      dist.allgather(padded.reshape({-1}).view(torch::kUInt8));
  std::vector<torch::Tensor> ordered;
  std::vector<int64_t> offset(static_cast<size_t>(dist.size()), 0);
  for (size_t k = 0;; ++k) {
    bool any = false;
    for (int64_t r = 0; r < dist.size(); ++r) {
      const auto& batch_rows = all[r]["rows"];
      if (k >= batch_rows.size()) continue;
      any = true;
      const int64_t n = batch_rows[k].get<int64_t>();
      ordered.push_back(gathered[r].view(dtype).view(shape).narrow(0, offset[r], n));
      offset[r] += n;
    }
    if (!any) break;
  }
  return torch::cat(ordered, 0);
}

}  // namespace

int64_t Trainer::predict(const std::string& checkpoint_dir, const std::string& output_file,
                         const DistributedContext& dist) {
  const ExperimentConfig config = train::for_evaluation(config_, dist.size());
  train::check_runnable(config, factory_, dist);
  if (!factory_.overrides_predict_batch) {
    throw PluginError(fmt::format(
        "trial {} does not implement predict_batch(batch, batch_idx), which trainer predict runs",
        factory_.name));
  }
  train::TrialSession session(config, factory_, dist);
  const checkpoint::Metadata meta = checkpoint::load(checkpoint_dir, session.contents());
  detail::set_trained_position(session.state(), meta.batches, meta.epochs);
  Trial& trial = session.trial();
  DataLoader loader = train::build_trial_loader(
      "build_predict_data_loader", [&] { return trial.build_predict_data_loader(); },
      session.state(), ShardMode::kStrideBatches);
  std::vector<torch::Tensor> outputs;
  {
    const train::EvalModeScope eval_mode(session.state().models);
    torch::NoGradGuard no_grad;
    train::for_each_strided_batch(loader, dist, "predict", "batch", [&](Batch& batch, int64_t idx) {
      outputs.push_back(
          train::call_trial([&] { return fmt::format("predict_batch (batch {})", idx); },
                            [&] {
                              const util::CrashScope crash_scope("in predict_batch", "batch", idx);
                              const AutocastRegion autocast = session.context().autocast(true);
                              return trial.predict_batch(batch, idx);
                            })
              .detach()
              .to(torch::kCPU));
      return true;
    });
  }
  const torch::Tensor all = gather_in_order(dist, outputs);
  if (dist.is_chief()) {
    try {
      util::replace_atomically(output_file, checkpoint::torch_dict_bytes({{"predictions", all}}));
    } catch (const std::exception& e) {
      throw TrainingError(fmt::format("cannot write predictions: {}", e.what()));
    }
  }
  return all.size(0);
}

}  // namespace crucible
