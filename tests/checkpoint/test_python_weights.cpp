// The weight files Crucible writes, read from Python without unpickling code: torch.load with
// weights_only=True, and safetensors (by the format's own few lines and, where installed, by the
// safetensors package).
#include <sstream>

#include "catch.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/tensor_files.h"
#include "resumable_run.h"
#include "util/file_io.h"

using namespace crucible::testing;
namespace ckpt = crucible::checkpoint;

namespace {

const std::string kReader = std::string(CRUCIBLE_SOURCE_DIR) + "/tests/checkpoint/read_weights.py";

// Python's name of a dtype.
std::string python_dtype(c10::ScalarType type) {
  switch (type) {
    case torch::kBool:
      return "torch.bool";
    case torch::kByte:
      return "torch.uint8";
    case torch::kChar:
      return "torch.int8";
    case torch::kShort:
      return "torch.int16";
    case torch::kInt:
      return "torch.int32";
    case torch::kLong:
      return "torch.int64";
    case torch::kHalf:
      return "torch.float16";
    case torch::kBFloat16:
      return "torch.bfloat16";
    case torch::kFloat:
      return "torch.float32";
    case torch::kDouble:
      return "torch.float64";
    default:
      FAIL("no Python name for " << c10::toString(type));
      return "";
  }
}

// How read_weights.py starts its line for a tensor: `name dtype [shape] ` (then the sum).
std::string python_line(const std::string& name, const torch::Tensor& t) {
  std::ostringstream shape;
  shape << "[";
  for (int64_t d = 0; d < t.dim(); ++d) shape << (d ? ", " : "") << t.size(d);
  shape << "]";
  return name + " " + python_dtype(t.scalar_type()) + " " + shape.str() + " ";
}

// The sum read_weights.py printed on the line that starts with `prefix`.
double printed_sum(const std::string& output, const std::string& prefix) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) return std::stod(line.substr(prefix.size()));
  }
  FAIL("read_weights.py printed no line starting with '" << prefix << "'");
  return 0;
}

void write_file_bytes(const std::string& path, const ckpt::NamedTensors& tensors, bool safe) {
  std::vector<char> bytes;
  auto sink = [&](const void* data, size_t size) {
    bytes.insert(bytes.end(), static_cast<const char*>(data),
                 static_cast<const char*>(data) + size);
  };
  if (safe) {
    ckpt::write_safetensors(tensors, {{"format", "pt"}}, sink);
  } else {
    bytes = ckpt::torch_dict_bytes(tensors);
  }
  crucible::util::write_durably(path, bytes);
}

CommandResult read_in_python(const std::string& pt, const std::string& safetensors = "") {
  return run_command(kPython + " " + kReader + " " + pt + " " + safetensors);
}

}  // namespace

TEST_CASE("tensors of every dtype load in Python with weights_only and as safetensors",
          "[checkpoint][python]") {
  torch::manual_seed(3);
  const ckpt::NamedTensors tensors = {
      {"f32", torch::arange(6, torch::kFloat).reshape({2, 3}) / 4},
      {"f64", torch::tensor({1.5, -2.25}, torch::kDouble)},
      {"f16", torch::arange(4, torch::kHalf)},
      {"bf16", torch::arange(5, torch::kBFloat16)},
      {"i64", torch::tensor({int64_t{1} << 40, int64_t{-3}}, torch::kLong)},
      {"i32", torch::tensor({-7, 70000}, torch::kInt)},
      {"i16", torch::tensor({-300, 300}, torch::kShort)},
      {"i8", torch::tensor({-5, 5}, torch::kChar)},
      {"u8_300", torch::arange(300, torch::kLong).remainder(256).to(torch::kByte)},
      {"bool", torch::tensor({true, false, true}, torch::kBool)},
      {"scalar", torch::tensor(3.5)},
      {"empty", torch::zeros({0, 4})},
      {"transposed", torch::arange(6, torch::kFloat).reshape({3, 2}).t()},
      {"layer.with.dots", torch::randn({3, 300})},
  };
  TempDir tmp;
  write_file_bytes(tmp / "t.pt", tensors, false);
  write_file_bytes(tmp / "t.safetensors", tensors, true);

  // C++ reads the .pt back bitwise.
  const auto bytes = crucible::util::read_file_bytes(tmp / "t.pt");
  const c10::IValue value = torch::pickle_load(bytes);
  REQUIRE(value.isGenericDict());
  const auto dict = value.toGenericDict();
  REQUIRE(dict.size() == tensors.size());
  for (const auto& [name, tensor] : tensors) {
    INFO(name);
    const torch::Tensor back = dict.at(name).toTensor();
    CHECK(back.scalar_type() == tensor.scalar_type());
    CHECK(torch::equal(back, tensor));
  }

  const CommandResult py = read_in_python(tmp / "t.pt", tmp / "t.safetensors");
  INFO(py.output);
  REQUIRE(py.exit_code == 0);
  for (const auto& [name, tensor] : tensors) {
    INFO(name);
    const std::string prefix = python_line(name, tensor);
    CHECK(printed_sum(py.output, prefix) == tensor.to(torch::kDouble).sum().item<double>());
  }
  CHECK_THAT(py.output, Catch::Contains(CRUCIBLE_PYTHON_SAFETENSORS ? "safetensors package: yes"
                                                                    : "safetensors package: no"));
}

TEST_CASE("a damaged safetensors file is refused by the Python reader", "[checkpoint][python]") {
  // The reader the test above relies on can fail: data one byte short of what the header says.
  TempDir tmp;
  const ckpt::NamedTensors tensors = {{"w", torch::ones({4})}};
  write_file_bytes(tmp / "t.pt", tensors, false);
  write_file_bytes(tmp / "t.safetensors", tensors, true);
  auto bytes = crucible::util::read_file_bytes(tmp / "t.safetensors");
  bytes.pop_back();
  crucible::util::write_durably(tmp / "t.safetensors", bytes);
  const CommandResult py = read_in_python(tmp / "t.pt", tmp / "t.safetensors");
  CHECK(py.exit_code != 0);
}

TEST_CASE("Python reads exactly the weights Crucible restores, from .pt and .safetensors",
          "[checkpoint][python]") {
  TempDir tmp;
  const std::string run = tmp / "run";
  REQUIRE(run_command(kTrainer + " fit " + resumable_config(tmp, 0) + " --quiet --output " + run +
                      " --set max_length.batches=10")
              .exit_code == 0);
  const std::string dir = run + "/checkpoints/batch-0000000010";
  auto model = resumable_model();
  const auto meta = ckpt::load_weights(dir, {model.ptr()});
  // Both files are checksummed parts of the checkpoint.
  CHECK(meta.files.contains("model_0.pt"));
  CHECK(meta.files.contains("model_0.safetensors"));

  const CommandResult py = read_in_python(dir + "/model_0.pt", dir + "/model_0.safetensors");
  INFO(py.output);
  REQUIRE(py.exit_code == 0);
  size_t checked = 0;
  for (const auto& p : model->named_parameters()) {
    INFO(p.key());
    CHECK(printed_sum(py.output, python_line(p.key(), p.value())) ==
          p.value().to(torch::kDouble).sum().item<double>());
    ++checked;
  }
  CHECK(checked == 4);
}
