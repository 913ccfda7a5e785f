#include "train/warm_start.h"

#include <fmt/format.h>

#include <crucible/errors.h>

#include "checkpoint/checkpoint.h"
#include "config/yaml_reader.h"
#include "train/checkpoint_path.h"
#include "util/file_system.h"

namespace crucible::train {

namespace {

// Throws ConfigError unless `dir` (searcher.`key`; "" for none) holds `file`, naming why it is not
// `what` (nothing there, a file, or a directory without `file`), followed by `hint`.
void require_source(const ExperimentConfig& config, const std::string& key, const std::string& dir,
                    const std::string& what, const std::string& file, const std::string& hint) {
  if (dir.empty() || util::exists(util::join(dir, file))) return;
  const std::string why = util::is_directory(dir)
                              ? fmt::format("is not {} (no {} in it)", what, file)
                              : fmt::format("is not {}: {}", what, util::not_a_directory(dir));
  throw ConfigError(fmt::format("{}: searcher.{}: {} {}; {}",
                                config::key_place(config, "searcher." + key), key, dir, why, hint));
}

}  // namespace

void check_warm_start_source(const ExperimentConfig& config) {
  const SearcherConfig& s = config.searcher;
  require_source(config, "source_trial_id", s.source_trial_id, "a run directory", "config.yaml",
                 "Crucible names a trial by its run directory, e.g. <experiment>/trials/3");
  require_source(config, "source_checkpoint_uuid", s.source_checkpoint_uuid, "a checkpoint",
                 "metadata.json", "give a checkpoint directory, <run>/checkpoints/batch-<N>");
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
