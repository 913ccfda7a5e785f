#include <crucible/trainer.h>

#include <vector>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"
#include "checkpoint/tensor_files.h"
#include "train/run_start.h"
#include "train/session.h"

namespace crucible {

int64_t Trainer::predict(const std::string& checkpoint_dir, const std::string& output_file) {
  const ExperimentConfig config = train::in_one_process(config_);
  train::check_runnable(config, factory_);
  if (!factory_.overrides_predict_batch) {
    throw PluginError(fmt::format(
        "trial {} does not implement predict_batch(batch, batch_idx), which trainer predict runs",
        factory_.name));
  }
  train::TrialSession session(config, factory_);
  const checkpoint::Metadata meta = checkpoint::load(checkpoint_dir, session.contents());
  detail::set_trained_position(session.state(), meta.batches, meta.epochs);
  Trial& trial = session.trial();
  DataLoader loader = train::call_trial(train::named("build_predict_data_loader"),
                                        [&] { return trial.build_predict_data_loader(); });
  loader.set_device(session.state().device);
  std::vector<torch::Tensor> outputs;
  for (auto& m : session.state().models) m->eval();
  {
    torch::NoGradGuard no_grad;
    int64_t idx = 0;
    for (Batch& batch : loader) {
      outputs.push_back(
          train::call_trial([&] { return fmt::format("predict_batch (batch {})", idx); },
                            [&] { return trial.predict_batch(batch, idx); })
              .detach()
              .to(torch::kCPU));
      ++idx;
    }
  }
  const torch::Tensor all = torch::cat(outputs, 0);
  try {
    checkpoint::write_durably(output_file, checkpoint::torch_dict_bytes({{"predictions", all}}));
  } catch (const std::exception& e) {
    throw TrainingError(fmt::format("cannot write predictions: {}", e.what()));
  }
  return all.size(0);
}

}  // namespace crucible
