#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <exception>
#include <iostream>
#include <system_error>
#include <unordered_set>

#include <fmt/format.h>

#include "checkpoint/optimizer_archive.h"
#include "checkpoint/state_dict.h"
#include "util/error_text.h"
#include "util/file_io.h"
#include "util/file_system.h"
#include "util/user_code.h"

namespace crucible::checkpoint {
using util::first_line;

namespace {

// metadata.json's key for the CRC-32 of the compact dump of the rest of it, so that damage to the
// metadata itself (a digit of a counter) is found as damage to the other files is.
constexpr const char* kOwnChecksum = "metadata_crc32";

nlohmann::json with_own_checksum(nlohmann::json meta) {
  meta[kOwnChecksum] = util::crc32_hex(meta.dump());
  return meta;
}

std::string indexed(const char* stem, size_t i, const char* extension = "pt") {
  return fmt::format("{}_{}.{}", stem, i, extension);
}

std::vector<torch::Device> cuda_devices() {
  std::vector<torch::Device> out;
  if (torch::cuda::is_available()) {
    for (size_t i = 0; i < static_cast<size_t>(torch::cuda::device_count()); ++i) {
      out.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
    }
  }
  return out;
}

std::string callback_key(const std::string& name) { return "callback_" + name; }

// trial_state.pt's key for the archive of Trial::save_state. Checkpoints written before it had
// one hold the trial's keys beside Crucible's.
constexpr const char* kTrialKey = "trial";

// For call_trial: "<TrialClass>::<method>" (the trial's method that `contents` calls).
auto trial_method(const Contents& contents, const char* method) {
  return [&contents, method] {
    return fmt::format("{}::{}", contents.trial_class.empty() ? "Trial" : contents.trial_class,
                       method);
  };
}

std::string rank_generator_key(const char* kind, size_t rank) {
  return fmt::format("{}_generator_state_rank_{}", kind, rank);
}

// Every part of `contents` in save order: each callback as "callback_<name>", then the
// registered parts.
std::vector<Part> all_parts(const Contents& contents) {
  std::vector<Part> parts;
  for (const auto& [name, callback] : contents.callbacks) {
    const auto hook = [name = name](const char* hook) {
      return [name, hook] { return fmt::format("callback '{}' {}", name, hook); };
    };
    parts.push_back({callback_key(name),
                     [cb = callback, hook](auto& archive) {
                       util::call_trial(hook("save_state"), [&] { cb->save_state(archive); });
                     },
                     [cb = callback, hook](torch::serialize::InputArchive& archive) {
                       util::call_trial(hook("load_state"), [&] { cb->load_state(archive); });
                     }});
  }
  parts.insert(parts.end(), contents.parts().begin(), contents.parts().end());
  return parts;
}

void write_trial_state(torch::serialize::OutputArchive& archive, const Contents& contents,
                       const RankGenerators& ranks) {
  archive.write("cpu_generator_state", at::detail::getDefaultCPUGenerator().get_state());
  for (size_t r = 0; r < ranks.cpu.size(); ++r) {
    archive.write(rank_generator_key("cpu", r), ranks.cpu[r]);
  }
  for (size_t r = 0; r < ranks.cuda.size(); ++r) {
    if (ranks.cuda[r].defined()) archive.write(rank_generator_key("cuda", r), ranks.cuda[r]);
  }
  const auto devices = cuda_devices();
  for (size_t i = 0; i < devices.size(); ++i) {
    archive.write(fmt::format("cuda_generator_state_{}", i),
                  at::globalContext().defaultGenerator(devices[i]).get_state());
  }
  if (contents.trial) {
    torch::serialize::OutputArchive own;
    util::call_trial(trial_method(contents, "save_state"),
                     [&] { contents.trial->save_state(own); });
    archive.write(kTrialKey, own);
  }
  for (const Part& part : all_parts(contents)) {
    torch::serialize::OutputArchive nested;
    part.save(nested);
    archive.write(part.name, nested);
  }
}

std::string gradient_key(size_t rank, size_t index) {
  return fmt::format("rank_{}_param_{}", rank, index);
}

// Rank `rank`'s gradients of `gradients` become those of gradient_parameters(contents).
void restore_gradients(const Contents& contents, torch::serialize::InputArchive& gradients,
                       int64_t rank) {
  const std::vector<torch::Tensor> params = gradient_parameters(contents);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor p = params[i];
    torch::Tensor saved;
    if (!gradients.try_read(gradient_key(static_cast<size_t>(rank), i), saved)) {
      if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
      continue;
    }
    if (saved.sizes() != p.sizes()) {
      throw TrainingError(fmt::format("gradients.pt: parameter {} has shape {}, its gradient {}", i,
                                      p.sizes(), saved.sizes()));
    }
    // Its layout as saved: a sparse gradient (an Embedding with sparse=true) stays sparse.
    p.mutable_grad() = saved.to(p.device(), p.scalar_type());
  }
}

// Loads the archive file `path` into `archive`, its tensors onto `device` when given (else the
// device each was saved from), reading its bytes here: a read error is thrown as "cannot read
// <path>: <reason>" rather than as LibTorch's report of its fopen.
void load_archive(torch::serialize::InputArchive& archive, const std::string& path,
                  c10::optional<torch::Device> device = c10::nullopt) {
  const std::vector<char> bytes = util::read_file_bytes(path);
  archive.load_from(bytes.data(), bytes.size(), device);
}

// The device every parameter of `optimizer` is on; nullopt when they are on several or it has
// none.
c10::optional<torch::Device> parameters_device(const torch::optim::Optimizer& optimizer) {
  c10::optional<torch::Device> device;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (!device) {
        device = p.device();
      } else if (*device != p.device()) {
        return c10::nullopt;
      }
    }
  }
  return device;
}

// Restores the generators, Trial::load_state and the parts. CUDA generators only when
// `same_gpus` (the writer saw as many GPUs).
void restore_trial_state(const Contents& contents, const std::string& path, int64_t rank,
                         const torch::Device& device, bool same_gpus) {
  torch::serialize::InputArchive archive;
  load_archive(archive, path);
  torch::Tensor state;
  if (!archive.try_read(rank_generator_key("cpu", static_cast<size_t>(rank)), state)) {
    archive.read("cpu_generator_state", state);
  }
  at::Generator cpu = at::detail::getDefaultCPUGenerator();
  cpu.set_state(state);
  if (same_gpus) {
    const auto devices = cuda_devices();
    for (size_t i = 0; i < devices.size(); ++i) {
      torch::Tensor cuda_state;
      if (archive.try_read(fmt::format("cuda_generator_state_{}", i), cuda_state)) {
        at::Generator gen = at::globalContext().defaultGenerator(devices[i]);
        gen.set_state(cuda_state);
      }
    }
    // A rank of a distributed run takes its own GPU's generator as that rank left it.
    torch::Tensor own;
    if (device.is_cuda() &&
        archive.try_read(rank_generator_key("cuda", static_cast<size_t>(rank)), own)) {
      at::Generator gen = at::globalContext().defaultGenerator(device);
      gen.set_state(own);
    }
  }
  if (contents.trial) {
    torch::serialize::InputArchive own;
    torch::serialize::InputArchive& trial_archive =
        archive.try_read(kTrialKey, own) ? own : archive;
    util::call_trial(trial_method(contents, "load_state"),
                     [&] { contents.trial->load_state(trial_archive); });
  }
  for (const Part& part : all_parts(contents)) {
    torch::serialize::InputArchive nested;
    archive.read(part.name, nested);
    try {
      part.load(nested);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw TrainingError(fmt::format("part '{}' load threw: {}", part.name, first_line(e)));
    }
  }
}

nlohmann::json callback_names(const Callbacks& callbacks) {
  nlohmann::json names = nlohmann::json::array();
  for (const auto& [name, callback] : callbacks) names.push_back(name);
  return names;
}

nlohmann::json part_names(const Contents& contents) {
  nlohmann::json names = nlohmann::json::array();
  for (const Part& part : contents.parts()) names.push_back(part.name);
  return names;
}

// Reads a file that verify() has checked.
std::vector<char> checked_file(const std::string& dir, const std::string& name) {
  return util::read_file_bytes(util::join(dir, name));
}

void expect_count(const std::string& dir, size_t found, size_t expected, const char* what) {
  if (found != expected) {
    throw TrainingError(fmt::format(
        "checkpoint {}: holds {} {}(s), the trial wraps {}; it was written by a different trial",
        dir, found, what, expected));
  }
}

void load_models(const std::string& dir, const Metadata& meta,
                 const std::vector<std::shared_ptr<torch::nn::Module>>& models) {
  expect_count(dir, meta.num_models, models.size(), "model");
  for (size_t i = 0; i < models.size(); ++i) {
    const std::string name = indexed("model", i);
    load_state_dict(*models[i], checked_file(dir, name), util::join(dir, name));
  }
}

}  // namespace

std::vector<torch::Tensor> gradient_parameters(const Contents& contents) {
  std::vector<torch::Tensor> out;
  std::unordered_set<const c10::TensorImpl*> seen;
  auto add = [&](const torch::Tensor& t) {
    if (seen.insert(t.unsafeGetTensorImpl()).second) out.push_back(t);
  };
  for (const auto& model : contents.models) {
    for (const auto& p : model->parameters()) add(p);
  }
  for (const auto& optimizer : contents.optimizers) {
    for (const auto& group : optimizer->param_groups()) {
      for (const auto& p : group.params()) add(p);
    }
  }
  return out;
}

void Contents::add_part(Part part) {
  auto refuse = [&](const char* why) {
    throw TrainingError(fmt::format("checkpoint part '{}': {}", part.name, why));
  };
  if (part.name.empty()) refuse("the name is empty");
  if (part.name.rfind("callback_", 0) == 0)
    refuse("names starting with 'callback_' are the callbacks' own");
  if (part.name == kTrialKey) refuse("the name is the trial's own");
  if (!part.save || !part.load) refuse("it needs both a save and a load function");
  for (const Part& p : parts_) {
    if (p.name == part.name) refuse("registered already");
  }
  parts_.push_back(std::move(part));
}

std::string checkpoints_dir(const std::string& run_dir) {
  return util::join(run_dir, "checkpoints");
}

std::string directory_name(int64_t batches) { return fmt::format("batch-{:010d}", batches); }

std::string save(const std::string& run_dir, int64_t batches, const Contents& contents,
                 Metadata metadata, const RankGenerators& rank_generators,
                 const AccumulatedGradients& gradients) {
  const std::string checkpoints = checkpoints_dir(run_dir);
  const std::string final_dir = util::join(checkpoints, directory_name(batches));
  const std::string tmp = util::join(checkpoints, ".tmp-" + directory_name(batches));
  try {
    util::remove_all(tmp);
    util::create_directories(tmp);
    nlohmann::json files = nlohmann::json::object();
    // Writes file `name` through `fill`, which writes its bytes into the DurableFile.
    auto put = [&](const std::string& name, const std::function<void(util::DurableFile&)>& fill) {
      util::DurableFile file(util::join(tmp, name));
      fill(file);
      file.finish();
      files[name] = {{"size", file.size()}, {"crc32", file.crc32_hex()}};
    };
    // An archive streams into its file: no copy of it is held in memory. A write that fails is
    // reported to LibTorch as done and rethrown once save_to returns: LibTorch's zip writer ends
    // the process (std::terminate, from its destructor) when its output reports a failure.
    auto put_archive = [&](const std::string& name,
                           const std::function<void(torch::serialize::OutputArchive&)>& fill) {
      put(name, [&](util::DurableFile& file) {
        torch::serialize::OutputArchive archive;
        fill(archive);
        std::exception_ptr failed;
        archive.save_to([&](const void* data, size_t size) {
          if (!failed) {
            try {
              file.write(data, size);
            } catch (...) {
              failed = std::current_exception();
            }
          }
          return size;
        });
        if (failed) std::rethrow_exception(failed);
      });
    };
    // Each model twice: a torch.load-able state dict and the same tensors as safetensors.
    for (size_t i = 0; i < contents.models.size(); ++i) {
      const NamedTensors tensors = state_dict(*contents.models[i]);
      put(indexed("model", i), [&](util::DurableFile& file) {
        const std::vector<char> bytes = torch_dict_bytes(tensors);
        file.write(bytes.data(), bytes.size());
      });
      put(indexed("model", i, "safetensors"), [&](util::DurableFile& file) {
        write_safetensors(tensors, {{"format", "pt"}},
                          [&](const void* data, size_t size) { file.write(data, size); });
      });
    }
    for (size_t i = 0; i < contents.optimizers.size(); ++i) {
      put_archive(indexed("optimizer", i), [&](torch::serialize::OutputArchive& a) {
        save_optimizer(*contents.optimizers[i], a);
      });
    }
    put_archive("trial_state.pt", [&](torch::serialize::OutputArchive& a) {
      write_trial_state(a, contents, rank_generators);
    });
    if (!gradients.by_rank.empty()) {
      put_archive("gradients.pt", [&](torch::serialize::OutputArchive& a) {
        for (size_t r = 0; r < gradients.by_rank.size(); ++r) {
          for (size_t i = 0; i < gradients.by_rank[r].size(); ++i) {
            const torch::Tensor& g = gradients.by_rank[r][i];
            if (g.defined()) a.write(gradient_key(r, i), g);
          }
        }
      });
    }

    metadata.schedulers = nlohmann::json::array();
    for (const auto& s : contents.schedulers) metadata.schedulers.push_back(s->state());
    metadata.num_models = contents.models.size();
    metadata.num_optimizers = contents.optimizers.size();
    metadata.callbacks = callback_names(contents.callbacks);
    metadata.parts = part_names(contents);
    metadata.cuda_devices = cuda_devices().size();
    metadata.files = files;
    util::write_durably(util::join(tmp, "metadata.json"),
                        with_own_checksum(metadata.to_json()).dump(2) + "\n");
    util::fsync_path(tmp);
    util::replace_directory(tmp, final_dir);
    util::fsync_path(checkpoints);
    util::replace_atomically(util::join(run_dir, "latest"), directory_name(batches) + "\n");
  } catch (const std::exception& e) {
    util::try_remove_all(tmp);
    throw TrainingError(fmt::format("cannot write checkpoint {}: {}", final_dir, first_line(e)));
  }
  return final_dir;
}

Metadata metadata(const std::string& dir) {
  if (!util::is_directory(dir)) {
    throw DamagedCheckpoint(fmt::format("checkpoint {}: {}", dir, util::not_a_directory(dir)));
  }
  nlohmann::json meta;
  try {
    const auto bytes = util::read_file_bytes(util::join(dir, "metadata.json"));
    meta = nlohmann::json::parse(bytes.begin(), bytes.end());
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's own text quotes up to hundreds of the bytes it read last; the offset says where.
    throw DamagedCheckpoint(fmt::format(
        "checkpoint {}: metadata.json is unreadable: not whole JSON (a syntax error at byte {}); "
        "the file is damaged or was cut short",
        dir, e.byte));
  } catch (const std::exception& e) {
    throw DamagedCheckpoint(fmt::format(
        "checkpoint {}: metadata.json is missing or unreadable ({})", dir, first_line(e)));
  }
  // Checkpoints written before metadata carried its own checksum have none to check.
  if (meta.is_object() && meta.contains(kOwnChecksum)) {
    const nlohmann::json written = meta[kOwnChecksum];
    meta.erase(kOwnChecksum);
    const std::string actual = util::crc32_hex(meta.dump());
    if (written != actual) {
      throw DamagedCheckpoint(
          fmt::format("checkpoint {}: metadata.json fails its checksum (crc32 {}, it says {})", dir,
                      actual, written.dump()));
    }
  }
  return Metadata::from_json(meta, "checkpoint " + dir + ": metadata.json");
}

Metadata verify(const std::string& dir) {
  Metadata meta = metadata(dir);
  for (const auto& [name, expected] : meta.files.items()) {
    const std::string path = util::join(dir, name);
    const auto size = util::file_size(path);
    if (!size) throw DamagedCheckpoint(fmt::format("checkpoint {}: {} is missing", dir, name));
    if (*size != expected.value("size", uint64_t{0})) {
      throw DamagedCheckpoint(fmt::format("checkpoint {}: {} has {} bytes, metadata says {}", dir,
                                          name, *size, expected.value("size", uint64_t{0})));
    }
    const std::string crc = util::sum_file(path).crc32;
    if (crc != expected.value("crc32", "")) {
      throw DamagedCheckpoint(
          fmt::format("checkpoint {}: {} fails its checksum (crc32 {}, metadata says {})", dir,
                      name, crc, expected.value("crc32", "")));
    }
  }
  return meta;
}

Metadata load(const std::string& dir, const Contents& contents, int64_t rank,
              const torch::Device& device) {
  const auto pinned = pin(dir);  // none: verify() names what is missing
  Metadata meta = verify(dir);
  if (!contents.trial_class.empty() && meta.trial_class != contents.trial_class) {
    throw TrainingError(fmt::format("checkpoint {}: was written by trial class '{}', not '{}'", dir,
                                    meta.trial_class.empty() ? "?" : meta.trial_class,
                                    contents.trial_class));
  }
  const nlohmann::json& saved_callbacks = meta.callbacks;
  if (saved_callbacks != callback_names(contents.callbacks)) {
    throw TrainingError(fmt::format(
        "checkpoint {}: holds the state of callbacks {}, the trial builds {}; it was written by a "
        "different trial",
        dir, saved_callbacks.dump(), callback_names(contents.callbacks).dump()));
  }
  const nlohmann::json& saved_parts = meta.parts;
  if (saved_parts != part_names(contents)) {
    throw TrainingError(fmt::format(
        "checkpoint {}: holds the state of parts {}, this run registers {}; it was written by a "
        "run with other checkpoint parts",
        dir, saved_parts.dump(), part_names(contents).dump()));
  }
  load_models(dir, meta, contents.models);
  expect_count(dir, meta.num_optimizers, contents.optimizers.size(), "optimizer");
  for (size_t i = 0; i < contents.optimizers.size(); ++i) {
    const std::string name = indexed("optimizer", i);
    try {
      torch::serialize::InputArchive archive;
      // Its state where its parameters are now, as PyTorch's load_state_dict puts it: another
      // rank's GPU than the writer's, or the CPU for a checkpoint written on a GPU.
      load_archive(archive, util::join(dir, name), parameters_device(*contents.optimizers[i]));
      contents.optimizers[i]->load(archive);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      // LibTorch compares the parameter groups' number and sizes; its message gives no remedy.
      const std::string cause = first_line(e);
      const bool groups_differ = cause.find("parameter group") != std::string::npos;
      throw TrainingError(fmt::format(
          "checkpoint {}: cannot restore optimizer from {}: {}{}", dir, name, cause,
          groups_differ ? "; when the trial's constructor returns, each optimizer must have the "
                          "parameter groups, with as many parameters each, that it had when the "
                          "checkpoint was written (a layer that trains later belongs in its "
                          "group from the start, with requires_grad false until then)"
                        : ""));
    }
  }
  try {
    const bool same_gpus = meta.cuda_devices == cuda_devices().size();
    restore_trial_state(contents, util::join(dir, "trial_state.pt"), rank, device, same_gpus);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw TrainingError(
        fmt::format("checkpoint {}: cannot restore trial_state.pt: {}", dir, first_line(e)));
  }
  if (meta.files.contains("gradients.pt")) {
    try {
      torch::serialize::InputArchive archive;
      load_archive(archive, util::join(dir, "gradients.pt"), device);
      restore_gradients(contents, archive, rank);
    } catch (const std::exception& e) {
      throw TrainingError(
          fmt::format("checkpoint {}: cannot restore gradients.pt: {}", dir, first_line(e)));
    }
  }
  const nlohmann::json& states = meta.schedulers;
  if (states.size() != contents.schedulers.size()) {
    throw TrainingError(fmt::format("checkpoint {}: holds {} scheduler(s), the trial wraps {}", dir,
                                    states.size(), contents.schedulers.size()));
  }
  for (size_t i = 0; i < states.size(); ++i) {
    try {
      contents.schedulers[i]->load_state(states[i]);
    } catch (const std::exception& e) {
      throw TrainingError(fmt::format("checkpoint {}: scheduler {}: {}", dir, i, first_line(e)));
    }
  }
  return meta;
}

Metadata load_weights(const std::string& dir,
                      const std::vector<std::shared_ptr<torch::nn::Module>>& models) {
  const auto pinned = pin(dir);  // none: verify() names what is missing
  Metadata meta = verify(dir);
  load_models(dir, meta, models);
  return meta;
}

std::vector<std::string> list(const std::string& run_dir) {
  std::vector<std::string> out;
  const std::string dir = checkpoints_dir(run_dir);
  if (!util::is_directory(dir)) return out;
  for (const auto& name : util::list_directory(dir)) {
    const std::string path = util::join(dir, name);
    if (name.rfind("batch-", 0) == 0 && util::is_directory(path)) out.push_back(path);
  }
  return out;
}

namespace {

// The file beside checkpoint `dir` that asks the last pin released on it to delete it.
std::string deletion_request(const std::string& dir) { return dir + ".to-delete"; }

// Deletes checkpoint `dir` unless a pin holds it; returns whether it is gone (now or before).
bool delete_unpinned(const std::string& dir) {
  std::unique_ptr<util::FileLock> lock;
  try {
    lock = util::FileLock::try_lock_directory(dir);
  } catch (const std::system_error& e) {
    if (e.code() == std::errc::no_such_file_or_directory) return true;
    throw;
  }
  if (!lock) return false;
  if (!lock->holds(dir)) return true;  // another process deleted it while this one locked it
  const std::string aside = util::move_aside(dir);
  lock.reset();  // a pin waiting for it finds `dir` gone
  util::remove_all(aside);
  return true;
}

}  // namespace

bool remove(const std::string& dir) {
  const std::string request = deletion_request(dir);
  if (delete_unpinned(dir)) {
    util::remove(request);
    return true;
  }
  util::write_durably(request, std::string());
  // A reader that let go after the first try but before the request existed did not see it.
  if (delete_unpinned(dir)) {
    util::remove(request);
    return true;
  }
  return false;
}

Pin::~Pin() {
  lock_.reset();
  try {
    const std::string request = deletion_request(dir_);
    if (util::exists(request) && delete_unpinned(dir_)) util::remove(request);
  } catch (const std::exception& e) {
    // Nothing is lost: the checkpoint stays, and so does the request, for a later reader or the
    // run's retention.
    std::cerr << "warning: checkpoint " << dir_
              << ": cannot see to the deletion its run's retention may have asked for ("
              << util::first_line(e) << "); it stays\n";
  } catch (...) {
  }
}

std::unique_ptr<Pin> pin(const std::string& dir) {
  try {
    std::unique_ptr<util::FileLock> lock = util::FileLock::lock_directory_shared(dir);
    if (!lock->holds(dir)) return nullptr;  // deleted while the lock was awaited
    return std::make_unique<Pin>(std::move(lock), dir);
  } catch (const std::system_error& e) {
    if (e.code() == std::errc::no_such_file_or_directory ||
        e.code() == std::errc::not_a_directory) {
      return nullptr;  // load() and verify() name what is there instead
    }
    throw TrainingError(fmt::format("checkpoint {}: {}", dir, e.what()));
  }
}

namespace {

// Whether checkpoint `dir` verifies (a damaged or unreadable one does not).
bool whole(const std::string& dir) {
  try {
    verify(dir);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

std::vector<std::string> remove_unfinished(const std::string& run_dir,
                                           const std::function<void(const std::string&)>& warn) {
  std::vector<std::string> out;
  const std::string dir = checkpoints_dir(run_dir);
  if (!util::is_directory(dir)) return out;
  for (const auto& name : util::list_directory(dir)) {
    const std::string temporary = ".tmp-";
    if (name.rfind(temporary, 0) != 0) continue;
    const std::string path = util::join(dir, name);
    const std::string final_dir = util::join(dir, name.substr(temporary.size()));
    // Written whole, but its move into place was cut short after the checkpoint it replaced was
    // moved aside (a file system that cannot exchange two names): it is the checkpoint.
    if (name.rfind(temporary + "batch-", 0) == 0 && !util::exists(final_dir) && whole(path)) {
      util::rename(path, final_dir);
      util::fsync_path(dir);
      if (warn) {
        warn(fmt::format(
            "moved {} into place: a checkpoint written whole whose move into place was cut short",
            path));
      }
      continue;
    }
    out.push_back(path);
  }
  for (const auto& path : out) util::remove_all(path);
  const std::string suffix = ".to-delete";
  for (const auto& name : util::list_directory(dir)) {
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    util::remove(util::join(dir, name));
  }
  return out;
}

std::string latest_name(const std::string& run_dir) {
  const std::string path = util::join(run_dir, "latest");
  if (!util::exists(path)) return "";
  const std::string text = util::read_file(path);
  return text.substr(0, text.find('\n'));
}

std::string newest_good(const std::string& run_dir,
                        const std::function<void(const std::string&)>& warn) {
  const auto all = list(run_dir);
  const std::string latest = latest_name(run_dir);
  if (all.empty()) {
    throw UsageError(
        latest.empty()
            ? fmt::format("{}: the run has no checkpoint", run_dir)
            : fmt::format("{}: the run has no checkpoint left (its file latest names {}, which "
                          "was removed)",
                          run_dir, latest));
  }
  const bool latest_gone =
      !latest.empty() && !util::exists(util::join(checkpoints_dir(run_dir), latest));
  std::string damaged;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      const Metadata meta = verify(*it);
      if (util::file_name(*it) != directory_name(meta.batches)) {
        throw DamagedCheckpoint(fmt::format(
            "checkpoint {}: it holds batch {} (copied or renamed by hand?)", *it, meta.batches));
      }
      if (latest_gone) {
        warn(
            fmt::format("{}/latest names checkpoint {}, which is no longer there (removed by "
                        "hand?); using {}, the newest checkpoint left",
                        run_dir, latest, util::file_name(*it)));
      }
      return *it;
    } catch (const DamagedCheckpoint& e) {
      if (std::next(it) != all.rend()) {
        warn(std::string(e.what()) + "; falling back to an older checkpoint");
      }
      damaged += std::string("\n  ") + e.what();
    }
  }
  throw TrainingError(fmt::format("{}: no checkpoint is loadable:{}", run_dir, damaged));
}

}  // namespace crucible::checkpoint
