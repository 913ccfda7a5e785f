// Checkpoint parts: a piece of state added with one registration is saved and restored.
#include "catch.h"

#include "checkpoint/checkpoint.h"
#include "optim/param_state.h"
#include "process.h"

using namespace crucible::testing;
namespace ckpt = crucible::checkpoint;

namespace {

// A part holding one tensor, as a gradient scaler's state would be.
ckpt::Part tensor_part(const std::string& name, torch::Tensor* value) {
  return {name, [value](torch::serialize::OutputArchive& a) { a.write("value", *value); },
          [value](torch::serialize::InputArchive& a) { a.read("value", *value); }};
}

// A trial whose save_state writes `value` under the keys Crucible uses for its own state.
class KeyClashTrial : public crucible::Trial {
 public:
  crucible::DataLoader build_training_data_loader() override { throw std::logic_error("unused"); }
  crucible::DataLoader build_validation_data_loader() override { throw std::logic_error("unused"); }
  crucible::Metrics train_batch(crucible::Batch&, int64_t, int64_t) override {
    throw std::logic_error("unused");
  }
  void save_state(torch::serialize::OutputArchive& archive) override {
    for (const char* key : {"cpu_generator_state", "callback_log", "grad_scaler"}) {
      archive.write(key, value);
    }
  }
  void load_state(torch::serialize::InputArchive& archive) override {
    archive.read("cpu_generator_state", value);
  }
  torch::Tensor value = torch::tensor({3.5});
};

}  // namespace

TEST_CASE("a trial's save_state keys are its own, whatever their names", "[checkpoint]") {
  TempDir tmp;
  auto model = torch::nn::Linear(2, 1);
  KeyClashTrial trial;
  torch::Tensor scale = torch::tensor({65536.0});
  ckpt::Contents contents;
  contents.models = {model.ptr()};
  contents.trial = &trial;
  contents.add_part(tensor_part("grad_scaler", &scale));
  torch::manual_seed(5);
  const std::string dir = ckpt::save(tmp / "run", 7, contents, ckpt::Metadata{});
  const torch::Tensor next = torch::rand({4});

  trial.value.fill_(0.0);
  scale.fill_(1.0);
  torch::manual_seed(6);
  ckpt::load(dir, contents);
  CHECK(trial.value.item<double>() == 3.5);
  CHECK(scale.item<double>() == 65536.0);
  CHECK(torch::equal(torch::rand({4}), next));  // the generator, not the trial's tensor
}

TEST_CASE("a registered checkpoint part is saved and restored with the rest", "[checkpoint]") {
  TempDir tmp;
  auto model = torch::nn::Linear(2, 1);
  torch::Tensor scale = torch::tensor({65536.0});
  ckpt::Contents contents;
  contents.models = {model.ptr()};
  contents.add_part(tensor_part("grad_scaler", &scale));
  ckpt::Metadata meta;
  meta.batches = 7;
  const std::string dir = ckpt::save(tmp / "run", 7, contents, meta);

  scale.fill_(1.0);
  const ckpt::Metadata loaded = ckpt::load(dir, contents);
  CHECK(scale.item<double>() == 65536.0);
  CHECK(loaded.parts == nlohmann::json::array({"grad_scaler"}));

  SECTION("a run without the part, or with another, is refused naming the parts") {
    ckpt::Contents without;
    without.models = {model.ptr()};
    CHECK_THROWS_WITH(ckpt::load(dir, without),
                      Catch::Contains("holds the state of parts [\"grad_scaler\"], this run "
                                      "registers []"));
    torch::Tensor other = torch::zeros({1});
    without.add_part(tensor_part("searcher", &other));
    CHECK_THROWS_WITH(ckpt::load(dir, without),
                      Catch::Contains("this run registers [\"searcher\"]"));
  }
  SECTION("a part whose load throws is named") {
    ckpt::Contents failing;
    failing.models = {model.ptr()};
    failing.add_part({"grad_scaler", [](torch::serialize::OutputArchive&) {},
                      [](torch::serialize::InputArchive& a) {
                        torch::Tensor t;
                        a.read("no_such_key", t);
                      }});
    CHECK_THROWS_WITH(ckpt::load(dir, failing), Catch::Contains("part 'grad_scaler' load threw"));
  }
}

TEST_CASE("part names are unique and not the callbacks'", "[checkpoint]") {
  torch::Tensor t = torch::zeros({1});
  ckpt::Contents contents;
  contents.add_part(tensor_part("scaler", &t));
  CHECK_THROWS_WITH(contents.add_part(tensor_part("scaler", &t)),
                    Catch::Contains("'scaler': registered already"));
  CHECK_THROWS_WITH(contents.add_part(tensor_part("callback_log", &t)),
                    Catch::Contains("the callbacks' own"));
  CHECK_THROWS_WITH(contents.add_part(tensor_part("", &t)), Catch::Contains("the name is empty"));
  CHECK_THROWS_WITH(contents.add_part(tensor_part("trial", &t)),
                    Catch::Contains("the name is the trial's own"));
  CHECK_THROWS_WITH(contents.add_part({"half", tensor_part("x", &t).save, nullptr}),
                    Catch::Contains("'half': it needs both a save and a load function"));
  CHECK(contents.parts().size() == 1);
}

TEST_CASE("an optimizer's state is restored onto its parameters' device, the CPU and each GPU",
          "[checkpoint]") {
  // A checkpoint written on one device loads where the parameters are now (a rank's own GPU, or
  // the CPU for a GPU run's checkpoint): here every pair of the CPU and the GPUs present.
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) {
    for (int i = 0; i < static_cast<int>(torch::cuda::device_count()); ++i) {
      devices.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
    }
  }
  for (const auto& from : devices) {
    for (const auto& to : devices) {
      INFO(from.str() << " to " << to.str());
      TempDir tmp;
      auto written = torch::nn::Linear(2, 1);
      written->to(from);
      auto adam = std::make_shared<torch::optim::Adam>(written->parameters(), 0.1);
      written->forward(torch::ones({3, 2}, from)).sum().backward();
      adam->step();
      ckpt::Contents saving;
      saving.models = {written.ptr()};
      saving.optimizers = {adam};
      const std::string dir = ckpt::save(tmp / "run", 1, saving, ckpt::Metadata{});

      auto read = torch::nn::Linear(2, 1);
      read->to(to);
      auto restored = std::make_shared<torch::optim::Adam>(read->parameters(), 0.1);
      ckpt::Contents loading;
      loading.models = {read.ptr()};
      loading.optimizers = {restored};
      ckpt::load(dir, loading, 0, to);
      for (const auto& p : read->parameters()) {
        const auto& state = static_cast<const torch::optim::AdamParamState&>(
            *restored->state().at(crucible::optim::detail::state_key(p)));
        CHECK(state.exp_avg().device() == to);
        CHECK(state.exp_avg_sq().device() == to);
      }
      // It trains on: a step with state and parameters on one device.
      read->forward(torch::ones({3, 2}, to)).sum().backward();
      CHECK_NOTHROW(restored->step());
    }
  }
}
