#include "catch.h"

#include <crucible/batch.h>
#include <crucible/errors.h>

using crucible::Batch;

TEST_CASE("a batch nests tensors, lists and dicts with positional and keyed access", "[data]") {
  Batch b = Batch::dict(
      {{"image", torch::ones({2, 3})}, {"targets", Batch{torch::zeros({2}), torch::arange(2)}}});
  CHECK(b.is_dict());
  CHECK(b.keys() == std::vector<std::string>{"image", "targets"});
  CHECK(b["image"].tensor().sum().item<float>() == 6);
  CHECK(b[1][1].tensor().equal(torch::arange(2)));
  CHECK(b["targets"].size() == 2);
  const torch::Tensor& t = b["image"];  // implicit conversion of a leaf
  CHECK(t.size(1) == 3);
  CHECK(b.first_tensor().equal(torch::ones({2, 3})));
  int leaves = 0;
  b.for_each_tensor([&](const torch::Tensor&) { ++leaves; });
  CHECK(leaves == 3);
}

TEST_CASE("first_tensor looks past containers that hold no tensor", "[data]") {
  const Batch b = Batch::dict(
      {{"meta", Batch::list({Batch::list({}), Batch::dict({})})}, {"x", torch::arange(3)}});
  CHECK(b.first_tensor().equal(torch::arange(3)));
  CHECK_THROWS_WITH(Batch::dict({{"meta", Batch::list({Batch::list({})})}}).first_tensor(),
                    Catch::Contains("no tensor in this batch"));
}

TEST_CASE("bad batch access names what is there", "[data]") {
  Batch b = Batch::dict({{"x", torch::ones({1})}});
  CHECK_THROWS_WITH(b["y"], Catch::Contains("no key 'y'; keys: x"));
  CHECK_THROWS_WITH(b[3], Catch::Contains("index 3 out of range for a dict of 1"));
  CHECK_THROWS_WITH(b.tensor(), Catch::Contains("expected a tensor, this is a dict"));
  CHECK_THROWS_AS(Batch::dict({{"x", torch::ones({1})}, {"x", torch::ones({1})}}), crucible::Error);
}

TEST_CASE("a batch element feeds a plain module, a Sequential and an AnyModule", "[data]") {
  torch::manual_seed(3);
  torch::nn::Linear linear(3, 2);
  torch::nn::Sequential sequential(linear, torch::nn::ReLU());
  torch::nn::AnyModule any(linear);
  Batch b{torch::randn({4, 3}), torch::zeros({4})};
  const Batch& constant = b;
  const torch::Tensor expected = linear->forward(b[0].tensor());
  CHECK(linear->forward(b[0]).equal(expected));  // forward(Tensor): the implicit conversion
  CHECK(sequential->forward(b[0]).equal(torch::relu(expected)));                  // a Batch&
  CHECK(sequential->forward(constant[0]).equal(torch::relu(expected)));           // a const Batch&
  CHECK(sequential->forward(Batch(b[0].tensor())).equal(torch::relu(expected)));  // a Batch
  CHECK(any.forward(b[0]).equal(expected));
  CHECK(any.forward(constant[0]).equal(expected));
  CHECK(any.any_forward(b[0]).get<torch::Tensor>().equal(expected));
  // A list or dict is not one tensor: LibTorch's error names both types.
  CHECK_THROWS_WITH(sequential->forward(b),
                    Catch::Contains("at::Tensor") && Catch::Contains("crucible::Batch"));
}

namespace {

// A module whose forward takes a whole Batch: the "image" of a dict, the first of a list.
struct PickImageImpl : torch::nn::Module {
  torch::Tensor forward(const Batch& batch) {
    return batch.is_dict() ? batch["image"].tensor() : batch[0].tensor();
  }
};
TORCH_MODULE(PickImage);

}  // namespace

TEST_CASE("a module taking a Batch gets a dict or list through Sequential and AnyModule",
          "[data]") {
  torch::manual_seed(3);
  torch::nn::Linear linear(3, 2);
  torch::nn::Sequential sequential(PickImage(), linear);
  torch::nn::AnyModule any(PickImage{});
  Batch b = Batch::dict({{"image", torch::randn({4, 3})}, {"label", torch::zeros({4})}});
  const Batch& constant = b;
  const torch::Tensor expected = linear->forward(b["image"]);
  CHECK(sequential->forward(b).equal(expected));         // a Batch&
  CHECK(sequential->forward(constant).equal(expected));  // a const Batch&
  CHECK(sequential->forward(Batch(b)).equal(expected));  // a Batch
  CHECK(any.forward(b).equal(b["image"].tensor()));
  CHECK(any.any_forward(constant).get<torch::Tensor>().equal(b["image"].tensor()));
  const Batch list{b["image"], b["label"]};
  CHECK(sequential->forward(list).equal(expected));
  CHECK(any.forward(list).equal(b["image"].tensor()));
  // A tensor leaf reaches it as a tensor, which a Batch parameter does not take.
  CHECK_THROWS_WITH(any.forward(b["image"]), Catch::Contains("crucible::Batch"));
}

TEST_CASE("to() moves every leaf and keeps the structure", "[data]") {
  Batch b = Batch::dict({{"a", Batch{torch::ones({2}, torch::kFloat), torch::ones({1})}}});
  Batch moved = b.to(torch::Device(torch::kCPU));
  CHECK(moved.keys() == b.keys());
  CHECK(moved["a"][0].tensor().equal(torch::ones({2})));
  CHECK(moved["a"].size() == 2);
}

TEST_CASE("collate stacks examples of the same structure", "[data]") {
  std::vector<Batch> examples;
  for (int i = 0; i < 3; ++i) {
    examples.push_back(Batch::dict(
        {{"x", torch::full({2}, static_cast<float>(i))}, {"y", Batch{torch::tensor(i)}}}));
  }
  Batch out = Batch::collate(examples);
  CHECK(out["x"].tensor().sizes() == std::vector<int64_t>{3, 2});
  CHECK(out["y"][0].tensor().equal(torch::tensor({0, 1, 2})));
}

TEST_CASE("collate names the first mismatch", "[data]") {
  std::vector<Batch> shape_mismatch{Batch{torch::ones({2})}, Batch{torch::ones({3})}};
  CHECK_THROWS_WITH(Batch::collate(shape_mismatch),
                    Catch::Contains("example 1 has shape [3] at '0', example 0 has [2]"));
  std::vector<Batch> key_mismatch{Batch::dict({{"a", torch::ones({1})}}),
                                  Batch::dict({{"b", torch::ones({1})}})};
  CHECK_THROWS_WITH(Batch::collate(key_mismatch), Catch::Contains("differs in structure"));
}
