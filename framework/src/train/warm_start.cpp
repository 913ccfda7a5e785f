#include "train/warm_start.h"

#include <fmt/format.h>

#include <crucible/errors.h>

#include "checkpoint/checkpoint.h"
#include "config/yaml_reader.h"
#include "train/checkpoint_path.h"
#include "util/file_system.h"

namespace crucible::train {

namespace {

// Why directory `dir`, which lacks `file`, is not `what`: "is not a run directory (no
// config.yaml in it)", or that nothing (or a file) is there.
std::string not_a(const std::string& dir, const std::string& what, const std::string& file) {
  if (!util::is_directory(dir))
    return fmt::format("is not {}: {}", what, util::not_a_directory(dir));
  return fmt::format("is not {} (no {} in it)", what, file);
}

}  // namespace

void check_warm_start_source(const ExperimentConfig& config) {
  const SearcherConfig& s = config.searcher;
  if (!s.source_trial_id.empty() && !util::exists(util::join(s.source_trial_id, "config.yaml"))) {
    throw ConfigError(fmt::format(
        "{}: searcher.source_trial_id: {} {}; Crucible names a trial by its run directory, e.g. "
        "<experiment>/trials/3",
        config::key_place(config, "searcher.source_trial_id"), s.source_trial_id,
        not_a(s.source_trial_id, "a run directory", "config.yaml")));
  }
  if (!s.source_checkpoint_uuid.empty() &&
      !util::exists(util::join(s.source_checkpoint_uuid, "metadata.json"))) {
    throw ConfigError(fmt::format(
        "{}: searcher.source_checkpoint_uuid: {} {}; give a checkpoint directory, "
        "<run>/checkpoints/batch-<N>",
        config::key_place(config, "searcher.source_checkpoint_uuid"), s.source_checkpoint_uuid,
        not_a(s.source_checkpoint_uuid, "a checkpoint", "metadata.json")));
  }
}

std::string warm_start_checkpoint(const ExperimentConfig& config, const std::string& given,
                                  const std::function<void(const std::string&)>& warn) {
  if (!given.empty()) return checkpoint_path(given, "--warm-start", warn);
  check_warm_start_source(config);
  const SearcherConfig& s = config.searcher;
  if (s.source_trial_id.empty()) return s.source_checkpoint_uuid;
  try {
    // An experiment: its best checkpoint, as --warm-start takes it.
    if (util::exists(util::join(s.source_trial_id, "experiment.jsonl"))) {
      return checkpoint_path(s.source_trial_id, "an experiment", warn);
    }
    return checkpoint::newest_good(s.source_trial_id, warn);
  } catch (const Error& e) {
    throw ConfigError(fmt::format("{}: searcher.source_trial_id: {}",
                                  config::key_place(config, "searcher.source_trial_id"), e.what()));
  }
}

}  // namespace crucible::train
