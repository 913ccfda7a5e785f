// save_optimizer: optimizer archives that equal states write as equal bytes, and that
// Optimizer::load reads back into an optimizer over other tensors.
#include <sstream>

#include "catch.h"

#include <crucible/optimizers.h>

#include "checkpoint/optimizer_archive.h"

namespace ckpt = crucible::checkpoint;

namespace {

// Two layers and a parameter that no loss reaches (so it never gets an optimizer state).
struct Net : torch::nn::Module {
  Net() {
    torch::manual_seed(7);
    first = register_module("first", torch::nn::Linear(4, 3));
    second = register_module("second", torch::nn::Linear(3, 2));
    unused = register_parameter("unused", torch::ones({2}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return second(torch::tanh(first(x))); }
  torch::nn::Linear first{nullptr}, second{nullptr};
  torch::Tensor unused;
};

// The parameters in three groups, the second and third with their own learning rate.
template <class Optimizer, class Options>
std::unique_ptr<Optimizer> make(Net& net, const Options& options) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(net.first->parameters());
  auto second = std::make_unique<Options>(options);
  second->lr(options.lr() / 2);
  groups.emplace_back(net.second->parameters(), std::move(second));
  auto third = std::make_unique<Options>(options);
  third->lr(options.lr() / 4);
  groups.emplace_back(std::vector<torch::Tensor>{net.unused}, std::move(third));
  return std::make_unique<Optimizer>(std::move(groups), options);
}

void train(Net& net, torch::optim::Optimizer& optimizer, int steps) {
  const torch::Tensor x = torch::linspace(-1, 1, 20).reshape({5, 4});
  for (int i = 0; i < steps; ++i) {
    optimizer.step([&] {
      optimizer.zero_grad();
      torch::Tensor loss = net.forward(x + 0.1 * i).pow(2).sum();
      loss.backward();
      return loss;
    });
  }
}

std::string bytes_of(const torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  ckpt::save_optimizer(optimizer, archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load_bytes(torch::optim::Optimizer& optimizer, const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  optimizer.load(archive);
}

void copy_parameters(Net& from, Net& to) {
  torch::NoGradGuard no_grad;
  const auto source = from.parameters(), target = to.parameters();
  for (size_t i = 0; i < source.size(); ++i) target[i].copy_(source[i]);
}

bool same_parameters(Net& a, Net& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    if (!torch::equal(pa[i], pb[i])) return false;
  }
  return true;
}

template <class Optimizer, class Options>
void check_round_trip(const Options& options) {
  Net a, b;  // equal values, other tensors
  auto opt_a = make<Optimizer>(a, options);
  auto opt_b = make<Optimizer>(b, options);
  train(a, *opt_a, 3);
  train(b, *opt_b, 3);
  REQUIRE(!opt_a->state().empty());
  const std::string bytes = bytes_of(*opt_a);
  CHECK(bytes == bytes_of(*opt_b));

  // Loaded into a third optimizer over a third net that has stepped from other weights, it steps
  // as the one it was saved from.
  Net c;
  c.first->weight.data().fill_(0.5);
  auto opt_c = make<Optimizer>(c, options);
  train(c, *opt_c, 1);
  copy_parameters(a, c);
  load_bytes(*opt_c, bytes);
  CHECK(opt_c->state().size() == opt_a->state().size());
  CHECK(bytes_of(*opt_c) == bytes);
  train(a, *opt_a, 2);
  train(c, *opt_c, 2);
  CHECK(same_parameters(a, c));
}

}  // namespace

TEST_CASE("LibTorch's optimizers are written as the same bytes for the same state, and load back",
          "[checkpoint]") {
  SECTION("SGD") {
    check_round_trip<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  SECTION("Adam") { check_round_trip<torch::optim::Adam>(torch::optim::AdamOptions(0.01)); }
  SECTION("AdamW") {
    check_round_trip<torch::optim::AdamW>(torch::optim::AdamWOptions(0.01).amsgrad(true));
  }
  SECTION("RMSprop") {
    check_round_trip<torch::optim::RMSprop>(torch::optim::RMSpropOptions(0.01).momentum(0.5));
  }
  SECTION("Crucible's Adadelta") {
    check_round_trip<crucible::optim::Adadelta>(crucible::optim::AdadeltaOptions(1.0).rho(0.8));
  }
  SECTION("Adagrad") { check_round_trip<torch::optim::Adagrad>(torch::optim::AdagradOptions(0.1)); }
}

TEST_CASE("an LBFGS state is written as the same bytes and loads back", "[checkpoint]") {
  Net a, b;
  torch::optim::LBFGS opt_a(a.parameters(), torch::optim::LBFGSOptions(0.5).history_size(4));
  torch::optim::LBFGS opt_b(b.parameters(), torch::optim::LBFGSOptions(0.5).history_size(4));
  train(a, opt_a, 2);
  train(b, opt_b, 2);
  const std::string bytes = bytes_of(opt_a);
  CHECK(bytes == bytes_of(opt_b));
  Net c;
  torch::optim::LBFGS opt_c(c.parameters(), torch::optim::LBFGSOptions(0.5).history_size(4));
  copy_parameters(a, c);
  load_bytes(opt_c, bytes);
  CHECK(bytes_of(opt_c) == bytes);
  train(a, opt_a, 1);
  train(c, opt_c, 1);
  CHECK(same_parameters(a, c));
}

namespace {
struct OwnFormat : torch::optim::SGD {
  using SGD::SGD;
  void save(torch::serialize::OutputArchive& archive) const override {
    archive.write("own_format", torch::ones({1}));
  }
};
}  // namespace

TEST_CASE("an optimizer of another class is written by its own save()", "[checkpoint]") {
  Net net;
  OwnFormat optimizer(net.parameters(), torch::optim::SGDOptions(0.1));
  std::istringstream in(bytes_of(optimizer));
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  torch::Tensor mark;
  CHECK(archive.try_read("own_format", mark));
  c10::IValue version;
  CHECK_FALSE(archive.try_read("pytorch_version", version));
}
