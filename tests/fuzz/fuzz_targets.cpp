#include "fuzz_targets.h"

#include <sstream>
#include <stdexcept>

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <crucible/config.h>
#include <crucible/datasets.h>
#include <crucible/errors.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/metadata.h"
#include "checkpoint/tensor_files.h"
#include "files.h"
#include "metrics/event_file.h"
#include "report/experiment_report.h"
#include "report/run_report.h"
#include "search/experiment_log.h"
#include "search/scheduler.h"
#include "search/trial_process.h"
#include "util/file_system.h"

namespace crucible::fuzz {
namespace {

namespace fs = crucible::util;

// A directory of this process for the readers that take a path, removed at exit.
const testing::TempDir& scratch() {
  static const testing::TempDir dir;
  return dir;
}

// Writes `input` to `name` in scratch() and returns its path.
std::string scratch_file(const std::string& name, std::string_view input) {
  const std::string path = scratch() / name;
  testing::write_file(path, std::string(input));
  return path;
}

std::string str(const std::vector<char>& bytes) { return {bytes.begin(), bytes.end()}; }

// Tensors of the dtypes and shapes weight files hold, in a few combinations.
std::vector<checkpoint::NamedTensors> tensor_sets() {
  return {
      {{"w", torch::arange(12, torch::kFloat).reshape({3, 4})}, {"b", torch::zeros(4)}},
      {{"x", torch::arange(6, torch::kLong)}, {"y", torch::tensor({true, false})}},
      {{"h", torch::ones({2, 2}, torch::kHalf)},
       {"bf", torch::full({3}, 0.5, torch::kBFloat16)},
       {"u", torch::arange(5, torch::kUInt8)},
       {"s", torch::tensor(3.0, torch::kDouble)},
       {"e", torch::empty({0, 3})}},
  };
}

// experiment files ----------------------------------------------------------------------------

void run_experiment_config(std::string_view input) {
  parse_experiment_config(std::string(input), "fuzz.yaml");
}

std::vector<std::string> experiment_config_seeds() {
  std::vector<std::string> seeds;
  const std::string configs = fs::join(CRUCIBLE_SOURCE_DIR, "configs");
  for (const std::string& name : fs::list_directory(configs)) {
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".yaml") == 0) {
      seeds.push_back(testing::read_file(fs::join(configs, name)));
    }
  }
  return seeds;
}

constexpr const char* kOverrideBase = R"(name: fuzz
entrypoint: lib:Trial
hyperparameters:
  global_batch_size: 32
  lr: 0.01
searcher:
  name: single
  metric: loss
  max_length: {batches: 10}
)";

void run_config_override(std::string_view input) {
  parse_experiment_config(kOverrideBase, "fuzz.yaml", {std::string(input)});
}

std::vector<std::string> config_override_seeds() {
  return {"hyperparameters.lr=0.5",
          "searcher.max_length={epochs: 2}",
          "hyperparameters.layers=[1, 2, {a: b}]",
          "optimizations.gradient_clipping.max_norm=1.0",
          "name=caf\xC3\xA9",
          "searcher={name: random, metric: loss, max_trials: 3, max_length: {batches: 5}}"};
}

// weight and tensor files ---------------------------------------------------------------------

void run_safetensors(std::string_view input) {
  checkpoint::read_safetensors(std::string(input), "fuzz.safetensors");
}

std::vector<std::string> safetensors_seeds() {
  std::vector<std::string> seeds;
  for (const auto& tensors : tensor_sets()) {
    std::string bytes;
    checkpoint::write_safetensors(tensors, {{"format", "pt"}}, [&](const void* data, size_t n) {
      bytes.append(static_cast<const char*>(data), n);
    });
    seeds.push_back(bytes);
  }
  return seeds;
}

void run_torch_dict(std::string_view input) {
  checkpoint::read_torch_dict(std::string(input), "fuzz.pt");
}

std::vector<std::string> torch_dict_seeds() {
  std::vector<std::string> seeds;
  for (const auto& tensors : tensor_sets())
    seeds.push_back(str(checkpoint::torch_dict_bytes(tensors)));
  return seeds;
}

// The records of a torch.save archive, with `pickle` as its data.pkl: zip checksums are right,
// so what is read is the pickle, as a tensor file whose pickle is damaged gives it to LibTorch.
std::string archive_with_pickle(std::string_view pickle) {
  std::string out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t size) -> size_t {
    out.append(static_cast<const char*>(bytes), size);
    return size;
  });
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  writer.writeRecord("byteorder", "little", 6);
  const std::string storage(64, '\x01');
  for (int i = 0; i < 5; ++i) {
    writer.writeRecord("data/" + std::to_string(i), storage.data(), storage.size());
  }
  writer.writeEndOfFile();
  return out;
}

void run_torch_pickle(std::string_view input) {
  checkpoint::read_torch_dict(archive_with_pickle(input), "fuzz.pt");
}

std::vector<std::string> torch_pickle_seeds() {
  std::vector<std::string> seeds;
  for (const auto& tensors : tensor_sets()) {
    std::istringstream bytes(str(checkpoint::torch_dict_bytes(tensors)));
    caffe2::serialize::PyTorchStreamReader reader(&bytes);
    const auto [data, size] = reader.getRecord("data.pkl");
    seeds.emplace_back(static_cast<const char*>(data.get()), size);
  }
  return seeds;
}

void run_idx(std::string_view input) { read_idx(scratch_file("data-idx", input)); }

std::vector<std::string> idx_seeds() {
  std::string images("\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x02", 16);
  for (int i = 0; i < 12; ++i) images.push_back(static_cast<char>(i * 20));
  std::string labels("\x00\x00\x08\x01\x00\x00\x00\x03\x07\x01\x09", 11);
  return {images, labels};
}

// run and experiment state --------------------------------------------------------------------

void run_tensorboard_event(std::string_view input) { metrics::decode_event(std::string(input)); }

std::vector<std::string> tensorboard_event_seeds() {
  metrics::Event version;
  version.wall_time = 1.7e9;
  version.file_version = "brain.Event:2";
  metrics::Event scalars;
  scalars.wall_time = 1.7e9 + 1;
  scalars.step = 120;
  scalars.scalars = {{"training/loss", 0.25f}, {"validation/accuracy", 0.875f}};
  metrics::Event start;
  start.wall_time = 1.7e9 + 2;
  start.session_start = true;
  return {metrics::encode_event(version), metrics::encode_event(scalars),
          metrics::encode_event(start)};
}

void run_checkpoint_metadata(std::string_view input) {
  const nlohmann::json json = nlohmann::json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) throw checkpoint::DamagedCheckpoint("metadata.json is not JSON");
  checkpoint::Metadata::from_json(json, "fuzz/metadata.json");
}

std::vector<std::string> checkpoint_metadata_seeds() {
  checkpoint::Metadata m;
  m.crucible_version = "0.9.0";
  m.trial_class = "FashionMnistCnn";
  m.hyperparameters = {{"lr", 0.01}, {"global_batch_size", 64}};
  m.config = "name: fuzz\n";
  m.batches = 200;
  m.records = 12800;
  m.epochs = 0.21;
  m.optimizer_steps = {200};
  m.data_position = {0, 200};
  m.validation = {{"accuracy", 0.8}, {"loss", std::nan("")}};
  m.trainer_state.training = {{"loss", {{"sum", 1.5}, {"count", 3}}}};
  m.trainer_state.validated_at = 200;
  m.trainer_state.best_metric = 0.4;
  m.schedulers = {{{"step_count", 200}}};
  m.num_models = 1;
  m.num_optimizers = 1;
  m.files = {{"model_0.pt", {{"size", 4096}, {"crc32", "0a1b2c3d"}}}};
  return {m.to_json().dump(), m.to_json().dump(2)};
}

void run_experiment_log(std::string_view input) {
  const search::ExperimentLog log(scratch_file("experiment.jsonl", input));
  for (const nlohmann::json& row : log.rows())
    search::Scheduler::result_of_row(row, "fuzz/experiment.jsonl");
}

std::vector<std::string> experiment_log_seeds() {
  return {
      R"({"event":"created","trial":1,"hparams":{"lr":0.01},"time":1.7e9}
{"event":"validated","trial":1,"length":2,"metric":0.41,"time":1.7e9}
{"event":"stopped","trial":1,"time":1.7e9}
{"event":"failed","trial":2,"error":"the trial threw","time":1.7e9}
{"event":"invalid","trial":3,"error":"lr must be positive","time":1.7e9}
{"event":"restarted","trial":2,"time":1.7e9}
)",
      R"({"event":"validated","trial":4,"length":6,"metric":null,"ended_early":"early stopping"}
)"};
}

void run_trial_metrics(std::string_view input) {
  const search::TrialFiles files(scratch().path(), 1);
  fs::create_directories(files.run_dir);
  testing::write_file(fs::join(files.run_dir, "metrics.jsonl"), std::string(input));
  search::read_segment_result(files, 1, {LengthUnit::kBatches, 100}, "loss", true);
}

std::vector<std::string> trial_metrics_seeds() {
  return {R"({"type":"training","batches":50,"epochs":0.5,"records":1600,"metrics":{"loss":0.9}}
{"type":"validation","batches":100,"epochs":1.0,"records":3200,"metrics":{"loss":0.5,"accuracy":0.8}}
)",
          R"({"type":"validation","batches":60,"epochs":0.6,"records":1920,"metrics":{"loss":null}}
{"type":"stopped","reason":"early stopping: loss did not improve"}
)"};
}

// A directory `name` in scratch() holding config.yaml with `config`.
std::string report_dir(const std::string& name, const std::string& config) {
  const std::string dir = scratch() / name;
  fs::create_directories(dir);
  testing::write_file(fs::join(dir, "config.yaml"), config);
  return dir;
}

void run_run_report(std::string_view input) {
  static const std::string dir =
      report_dir("report-run",
                 "name: fuzz\nentrypoint: fuzz:Trial\nhyperparameters: {global_batch_size: 16}\n"
                 "searcher: {metric: loss}\nmax_length: {batches: 100}\n");
  testing::write_file(fs::join(dir, "metrics.jsonl"), std::string(input));
  report::run_page(dir, dir);
}

void run_experiment_report(std::string_view input) {
  static const std::string dir = report_dir(
      "report-experiment",
      "name: fuzz\nentrypoint: fuzz:Trial\n"
      "hyperparameters: {global_batch_size: 16, lr: {type: log, minval: -3, maxval: 0}}\n"
      "searcher: {name: adaptive_asha, metric: loss, max_trials: 4, max_time: 16, "
      "time_metric: batches}\nmax_length: {batches: 16}\n");
  testing::write_file(fs::join(dir, "experiment.jsonl"), std::string(input));
  report::experiment_page(dir, dir,
                          [](int64_t, const report::TrialEnding&) { return std::string(); });
}

}  // namespace

const std::vector<Target>& targets() {
  static const std::vector<Target> all = {
      {"experiment_config", run_experiment_config, experiment_config_seeds},
      {"config_override", run_config_override, config_override_seeds},
      {"safetensors", run_safetensors, safetensors_seeds},
      {"torch_dict", run_torch_dict, torch_dict_seeds},
      {"torch_pickle", run_torch_pickle, torch_pickle_seeds},
      {"idx", run_idx, idx_seeds},
      {"tensorboard_event", run_tensorboard_event, tensorboard_event_seeds},
      {"checkpoint_metadata", run_checkpoint_metadata, checkpoint_metadata_seeds},
      {"experiment_log", run_experiment_log, experiment_log_seeds},
      {"trial_metrics", run_trial_metrics, trial_metrics_seeds},
      {"run_report", run_run_report, trial_metrics_seeds},
      {"experiment_report", run_experiment_report, experiment_log_seeds},
  };
  return all;
}

const Target& target(std::string_view name) {
  std::string names;
  for (const Target& t : targets()) {
    if (t.name == name) return t;
    names += (names.empty() ? "" : ", ") + t.name;
  }
  throw std::invalid_argument("no fuzz target '" + std::string(name) + "'; there are: " + names);
}

}  // namespace crucible::fuzz
