#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include <crucible/errors.h>

namespace crucible::checkpoint {
namespace fs = std::filesystem;

namespace {

std::string indexed(const char* stem, size_t i) { return fmt::format("{}_{}.pt", stem, i); }

template <class Fn>
void io(const std::string& what, const fs::path& path, Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    msg = msg.substr(0, msg.find('\n'));
    throw TrainingError(fmt::format("checkpoint: cannot {} {}: {}", what, path.string(), msg));
  }
}

void check_count(const fs::path& dir, const char* stem, size_t expected) {
  size_t found = 0;
  while (fs::exists(dir / indexed(stem, found))) ++found;
  if (found != expected) {
    throw TrainingError(fmt::format(
        "checkpoint {}: holds {} {} file(s), the trial wraps {}; it was written by a different "
        "trial or is incomplete",
        dir.string(), found, stem, expected));
  }
}

}  // namespace

std::string directory_name(int64_t batches) { return fmt::format("batch-{:010d}", batches); }

void save(const std::string& dir, const Contents& contents, nlohmann::json metadata) {
  const fs::path final_dir(dir);
  const fs::path tmp = final_dir.parent_path() / (".tmp-" + final_dir.filename().string());
  io("write", tmp, [&] {
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    for (size_t i = 0; i < contents.models.size(); ++i) {
      torch::serialize::OutputArchive archive;
      contents.models[i]->save(archive);
      archive.save_to((tmp / indexed("model", i)).string());
    }
    for (size_t i = 0; i < contents.optimizers.size(); ++i) {
      torch::serialize::OutputArchive archive;
      contents.optimizers[i]->save(archive);
      archive.save_to((tmp / indexed("optimizer", i)).string());
    }
    torch::serialize::OutputArchive trial_archive;
    trial_archive.write("cpu_generator_state", at::detail::getDefaultCPUGenerator().get_state());
    if (contents.trial) contents.trial->save_state(trial_archive);
    trial_archive.save_to((tmp / "trial_state.pt").string());

    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : contents.schedulers) steps.push_back(s->step_count());
    metadata["scheduler_steps"] = steps;
    metadata["num_models"] = contents.models.size();
    metadata["num_optimizers"] = contents.optimizers.size();
    std::ofstream meta(tmp / "metadata.json");
    meta << metadata.dump(2) << '\n';
    meta.close();
    if (!meta) throw std::runtime_error(std::strerror(errno));
  });
  io("publish", final_dir, [&] {
    fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);
  });
}

nlohmann::json load(const std::string& dir, const Contents& contents) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) {
    throw TrainingError(fmt::format("checkpoint {}: no such directory", dir));
  }
  nlohmann::json metadata;
  io("read", root / "metadata.json", [&] {
    std::ifstream in(root / "metadata.json");
    if (!in) throw std::runtime_error("missing or unreadable");
    metadata = nlohmann::json::parse(in);
  });
  check_count(root, "model", contents.models.size());
  check_count(root, "optimizer", contents.optimizers.size());
  for (size_t i = 0; i < contents.models.size(); ++i) {
    const fs::path path = root / indexed("model", i);
    io("load", path, [&] {
      torch::serialize::InputArchive archive;
      archive.load_from(path.string());
      contents.models[i]->load(archive);
    });
  }
  for (size_t i = 0; i < contents.optimizers.size(); ++i) {
    const fs::path path = root / indexed("optimizer", i);
    io("load", path, [&] {
      torch::serialize::InputArchive archive;
      archive.load_from(path.string());
      contents.optimizers[i]->load(archive);
    });
  }
  const fs::path trial_path = root / "trial_state.pt";
  io("load", trial_path, [&] {
    torch::serialize::InputArchive archive;
    archive.load_from(trial_path.string());
    torch::Tensor state;
    archive.read("cpu_generator_state", state);
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(state);
    if (contents.trial) contents.trial->load_state(archive);
  });
  const auto steps = metadata.value("scheduler_steps", nlohmann::json::array());
  if (steps.size() != contents.schedulers.size()) {
    throw TrainingError(fmt::format("checkpoint {}: holds {} scheduler(s), the trial wraps {}", dir,
                                    steps.size(), contents.schedulers.size()));
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    contents.schedulers[i]->set_step_count(steps[i].get<int64_t>());
  }
  return metadata;
}

std::vector<std::string> list(const std::string& run_dir) {
  std::vector<std::string> out;
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(dir)) return out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("batch-", 0) == 0) out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace crucible::checkpoint
