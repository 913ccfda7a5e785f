// The dataset readers on the real Fashion-MNIST files and on files Python writes here.
#include "catch.h"

#include <crucible/datasets.h>
#include <crucible/errors.h>

#include "damage.h"
#include "process.h"

using namespace crucible::testing;

namespace {

const std::string kFashion = "/usr/share/datasets/fashion-mnist";

// Runs Python `code` (with torch imported, sys.argv[1] = `dir`); fails the test when it fails.
void python(const std::string& dir, const std::string& code) {
  const std::string script = dir + "/make.py";
  write_file(script, "import gzip, json, struct, sys\nimport torch\n" + code);
  const CommandResult r = run_command(kPython + " " + script + " " + dir);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
}

}  // namespace

TEST_CASE("read_mnist reads the real Fashion-MNIST test split", "[data]") {
  const auto [images, labels] = crucible::read_mnist(kFashion, "t10k");
  CHECK(images.sizes() == torch::IntArrayRef({10000, 28, 28}));
  CHECK(images.dtype() == torch::kUInt8);
  CHECK(labels.sizes() == torch::IntArrayRef({10000}));
  CHECK(labels.dtype() == torch::kLong);
  // Ten classes of 1000 test images each.
  CHECK(torch::bincount(labels).equal(torch::full({10}, 1000, torch::kLong)));
  CHECK(images.max().item<int>() == 255);
  CHECK_THROWS_WITH(crucible::read_mnist("/nonexistent", "t10k", "Install it from the shop"),
                    "IDX file /nonexistent/t10k-images-idx3-ubyte.gz not found. Install it from "
                    "the shop");
}

TEST_CASE("read_idx reads IDX files gzipped or not, and names a malformed one", "[data]") {
  TempDir tmp;
  python(tmp.str(), R"(
d = sys.argv[1]
body = struct.pack('>BBBB', 0, 0, 8, 2) + struct.pack('>II', 2, 3) + bytes(range(6))
open(d + '/plain-idx2-ubyte', 'wb').write(body)
gzip.open(d + '/packed-idx2-ubyte.gz', 'wb').write(body)
open(d + '/short-idx2-ubyte', 'wb').write(body[:-1])
open(d + '/long-idx2-ubyte', 'wb').write(body + b'x')
open(d + '/floats-idx2-ubyte', 'wb').write(struct.pack('>BBBB', 0, 0, 13, 1) + struct.pack('>I', 1))
# A header claiming 80 GiB over 60 bytes: refused as truncated, nothing of that size allocated.
open(d + '/huge-idx3-ubyte', 'wb').write(struct.pack('>BBBB', 0, 0, 8, 3) +
                                          struct.pack('>III', 0xffffffff, 4, 5) + bytes(60))
)");
  const auto expected = torch::arange(6, torch::kUInt8).reshape({2, 3});
  CHECK(crucible::read_idx(tmp / "plain-idx2-ubyte").equal(expected));
  CHECK(crucible::read_idx(tmp / "packed-idx2-ubyte.gz").equal(expected));
  CHECK_THROWS_WITH(crucible::read_idx(tmp / "short-idx2-ubyte"),
                    Catch::Contains("short-idx2-ubyte: truncated or corrupt IDX file"));
  CHECK_THROWS_WITH(crucible::read_idx(tmp / "long-idx2-ubyte"),
                    Catch::Contains("more bytes than its shape [2, 3] holds"));
  CHECK_THROWS_WITH(crucible::read_idx(tmp / "floats-idx2-ubyte"),
                    Catch::Contains("not an IDX file of unsigned bytes"));
  CHECK_THROWS_WITH(crucible::read_idx(tmp / "huge-idx3-ubyte"),
                    Catch::Contains("huge-idx3-ubyte: truncated or corrupt IDX file"));
  CHECK_THROWS_AS(crucible::read_idx(tmp / "missing"), crucible::TrainingError);
}

TEST_CASE("read_cifar10 reads the binary format: label byte, then red, green, blue planes",
          "[data]") {
  TempDir tmp;
  python(tmp.str(), R"(
d = sys.argv[1]
def record(label, seed):
    g = torch.Generator().manual_seed(seed)
    return bytes([label]) + bytes(torch.randint(0, 256, (3072,), generator=g, dtype=torch.uint8).tolist())
for i in range(1, 6):
    open(d + '/data_batch_%d.bin' % i, 'wb').write(record(i, i) + record(i + 1, 10 + i))
open(d + '/test_batch.bin', 'wb').write(record(9, 99))
open(d + '/torn.bin', 'wb').write(record(1, 1)[:-7])
img = torch.randint(0, 256, (3072,), generator=torch.Generator().manual_seed(99), dtype=torch.uint8)
torch.save({'image': img.reshape(3, 32, 32), 'label': torch.tensor(9)}, d + '/expected.pt')
)");
  const auto [train_x, train_y] = crucible::read_cifar10(tmp.str(), /*train=*/true);
  CHECK(train_x.sizes() == torch::IntArrayRef({10, 3, 32, 32}));
  CHECK(train_y.equal(torch::tensor({1, 2, 2, 3, 3, 4, 4, 5, 5, 6}, torch::kLong)));
  const auto [test_x, test_y] = crucible::read_cifar10(tmp.str(), /*train=*/false);
  CHECK(test_y.equal(torch::tensor({9}, torch::kLong)));
  const auto expected = crucible::read_tensor_file(tmp / "expected.pt").at("image");
  CHECK(test_x[0].equal(expected));
  CHECK_THROWS_WITH(crucible::read_cifar10({tmp / "torn.bin"}),
                    Catch::Contains("torn.bin: 3066 bytes is not a whole number of CIFAR-10 "
                                    "records (3073 bytes each)"));
}

TEST_CASE("tensors Python saved, with torch.save or as safetensors, become a dataset", "[data]") {
  TempDir tmp;
  const std::string dir = tmp / "tensors";
  // safetensors written by hand from its specification: no package needed.
  python(tmp.str(), R"(
import os
d = sys.argv[1] + '/tensors'
os.makedirs(d)
x = torch.arange(12, dtype=torch.float32).reshape(4, 3)
y = torch.tensor([0, 1, 0, 1], dtype=torch.int64)
torch.save({'x': x, 'x_squared': x * x}, d + '/features.pt')
data = y.numpy().tobytes()
header = json.dumps({'__metadata__': {'by': 'test'},
                     'y': {'dtype': 'I64', 'shape': [4], 'data_offsets': [0, len(data)]}}).encode()
open(d + '/labels.safetensors', 'wb').write(struct.pack('<Q', len(header)) + header + data)
open(d + '/notes.txt', 'w').write('not a tensor file')
torch.save({'x': x[:2], 'w': x[:2]}, sys.argv[1] + '/other.pt')
torch.save({'x': x}, sys.argv[1] + '/single.pt')
torch.save([x, x], sys.argv[1] + '/list.pt')
)");
  const auto files = crucible::read_tensor_file(dir + "/labels.safetensors");
  REQUIRE(files.count("y") == 1);
  CHECK(files.at("y").equal(torch::tensor({0, 1, 0, 1}, torch::kLong)));

  const auto dataset = crucible::load_tensor_dataset(dir, {"x", "y"});
  REQUIRE(dataset->size() == 4);
  const crucible::Batch third = dataset->get(2);
  CHECK(third[0].tensor().equal(torch::tensor({6.0f, 7.0f, 8.0f})));
  CHECK(third[1].tensor().item<int64_t>() == 0);
  crucible::DataLoader loader(dataset, crucible::DataLoaderOptions(2));
  int64_t batches = 0;
  for (crucible::Batch& b : loader) {
    CHECK(b[0].tensor().size(0) == 2);
    ++batches;
  }
  CHECK(batches == 2);

  CHECK_THROWS_WITH(crucible::load_tensor_dataset(dir, {"x", "z"}),
                    Catch::Contains("no tensor 'z'; it has: x, x_squared, y"));
  // A dict of one tensor: read, or (LibTorch 1.13) refused saying why.
  torch::Tensor single;
  std::string refusal;
  try {
    single = crucible::read_tensor_file(tmp / "single.pt").at("x");
  } catch (const crucible::TrainingError& e) {
    refusal = e.what();
  }
  if (refusal.empty()) {
    CHECK(single.equal(torch::arange(12, torch::kFloat).reshape({4, 3})));
  } else {
    CHECK_THAT(refusal, Catch::Contains("cannot read a dict of one entry"));
  }
  CHECK_THROWS_WITH(
      crucible::load_tensor_dataset(tmp / "list.pt", {"x"}),
      Catch::Contains("list.pt: holds a") && Catch::Contains("not a dict of tensors"));
  run_command("cp " + (tmp / "other.pt") + " " + dir + "/more.pt");
  CHECK_THROWS_WITH(crucible::load_tensor_dataset(dir, {"x"}),
                    Catch::Contains("tensor 'x' is in both"));
  CHECK_THROWS_AS(crucible::read_tensor_file(dir + "/notes.txt"), crucible::TrainingError);
}

TEST_CASE("damaged IDX, CIFAR-10, torch.save and safetensors files are refused by name", "[data]") {
  TempDir tmp;
  python(tmp.str(), R"(
d = sys.argv[1]
body = struct.pack('>BBBB', 0, 0, 8, 3) + struct.pack('>III', 3, 4, 5) + bytes(range(60))
open(d + '/good-idx3-ubyte', 'wb').write(body)
gzip.open(d + '/good-idx3-ubyte.gz', 'wb').write(body)
open(d + '/good.bin', 'wb').write(bytes(range(256)) * 24 + bytes(range(2)))
x = torch.arange(12, dtype=torch.float32).reshape(4, 3)
torch.save({'x': x, 'y': torch.tensor([1, 0, 1, 0])}, d + '/good.pt')
data = x.numpy().tobytes()
header = json.dumps({'x': {'dtype': 'F32', 'shape': [4, 3], 'data_offsets': [0, len(data)]}})
open(d + '/good.safetensors', 'wb').write(struct.pack('<Q', len(header)) + header.encode() + data)
)");
  // Each good file reads, so that a refusal below is the damage's doing.
  REQUIRE(crucible::read_idx(tmp / "good-idx3-ubyte").sizes() == torch::IntArrayRef({3, 4, 5}));
  REQUIRE(crucible::read_idx(tmp / "good-idx3-ubyte.gz").sizes() == torch::IntArrayRef({3, 4, 5}));
  REQUIRE(crucible::read_cifar10({tmp / "good.bin"}).second.size(0) == 2);
  REQUIRE(crucible::read_tensor_file(tmp / "good.pt").size() == 2);
  REQUIRE(crucible::read_tensor_file(tmp / "good.safetensors")
              .at("x")
              .equal(torch::arange(12, torch::kFloat).reshape({4, 3})));

  // Each reader reads damaged copies written to bad*, named like the good file they come from.
  const auto refused = [&](const std::string& good_name,
                           const std::function<void(const std::string&)>& read) {
    std::string bad_name = good_name;
    bad_name.replace(0, 4, "bad");
    const std::string path = tmp / bad_name;
    return damaged_copies_refused<crucible::TrainingError>(read_file(tmp / good_name), path, 400,
                                                           [&](const std::string& bytes) {
                                                             write_file(path, bytes);
                                                             read(path);
                                                           });
  };
  const auto idx = [](const std::string& p) { crucible::read_idx(p); };
  const auto tensors = [](const std::string& p) { crucible::read_tensor_file(p); };
  // A truncation or an insertion breaks any file whose header fixes its size: at least half.
  CHECK(refused("good-idx3-ubyte", idx) >= 200);
  CHECK(refused("good-idx3-ubyte.gz", idx) >= 200);
  CHECK(refused("good.bin", [](const std::string& p) { crucible::read_cifar10({p}); }) >= 100);
  CHECK(refused("good.pt", tensors) >= 200);
  CHECK(refused("good.safetensors", tensors) >= 200);
}
