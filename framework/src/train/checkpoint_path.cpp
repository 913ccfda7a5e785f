#include "train/checkpoint_path.h"

#include <fmt/format.h>

#include <crucible/errors.h>

#include "checkpoint/checkpoint.h"
#include "util/file_system.h"

namespace crucible::train {
namespace {

bool holds(const std::string& dir, const char* name) { return util::exists(util::join(dir, name)); }

// The first line of pointer file `path`.
std::string pointed_name(const std::string& path) {
  const std::string text = util::read_file(path);
  return text.substr(0, text.find('\n'));
}

// `dir`, which pointer `pointer` names, when it is a checkpoint.
std::string pointed_checkpoint(const std::string& dir, const std::string& pointer,
                               const std::string& flag, const std::string& given) {
  if (!holds(dir, "metadata.json")) {
    throw UsageError(
        fmt::format("{} {}: {} names {}, which is not a checkpoint", flag, given, pointer, dir));
  }
  return dir;
}

}  // namespace

std::string checkpoint_path(const std::string& given, const std::string& flag,
                            const std::function<void(const std::string&)>& warn) {
  if (given.empty()) throw UsageError(flag + " DIR is required");
  if (!util::exists(given)) {
    throw UsageError(fmt::format("{} {}: no such file or directory", flag, given));
  }
  if (util::is_directory(given)) {
    if (holds(given, "metadata.json")) return given;
    if (holds(given, "experiment.jsonl")) {
      const std::string best = util::join(given, "best");
      if (!util::exists(best)) {
        throw UsageError(fmt::format(
            "{} {}: the experiment has no best checkpoint yet (no file 'best'); give one of its "
            "trials, {}/trials/<id>",
            flag, given, given));
      }
      return pointed_checkpoint(util::join(given, pointed_name(best)), best, flag, given);
    }
    if (holds(given, "config.yaml")) return checkpoint::newest_good(given, warn);
  } else {
    const std::string dir = util::parent_path(util::absolute(given));
    const std::string name = util::file_name(given);
    if (name == "best" && holds(dir, "experiment.jsonl")) {
      return pointed_checkpoint(util::join(dir, pointed_name(given)), given, flag, given);
    }
    if (name == "metadata.json") return dir;  // a checkpoint's own file names it
    if (name == "latest" && holds(dir, "config.yaml")) {
      return pointed_checkpoint(util::join(checkpoint::checkpoints_dir(dir), pointed_name(given)),
                                given, flag, given);
    }
    const bool in_one = holds(dir, "metadata.json") || holds(dir, "config.yaml");
    throw UsageError(fmt::format(
        "{} {}: a file, not a checkpoint, run or experiment directory{}", flag, given,
        in_one ? fmt::format("; give the directory it is in, {}", dir)
               : " (nor a run's latest, an experiment's best or a checkpoint's metadata.json)"));
  }
  throw UsageError(fmt::format(
      "{} {}: neither a checkpoint (no metadata.json), a run (no config.yaml) nor an experiment "
      "(no experiment.jsonl); a checkpoint is <run>/checkpoints/batch-<N>",
      flag, given));
}

PinnedCheckpoint pin_resolved(const std::function<std::string()>& resolve) {
  constexpr int kAttempts = 10;
  std::string deleted;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    PinnedCheckpoint c{resolve(), nullptr};
    if (c.dir.empty()) return c;
    if (c.dir == deleted) break;
    c.pin = checkpoint::pin(c.dir);
    if (c.pin) return c;
    deleted = c.dir;
  }
  throw TrainingError(fmt::format(
      "checkpoint {} was deleted before it could be read: the run that wrote it is still "
      "training, and its retention (checkpoint_storage.save_trial_latest) removed it; name the "
      "run directory to read its newest checkpoint",
      deleted));
}

}  // namespace crucible::train
