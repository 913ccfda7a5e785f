#include "train/grad_sync.h"

namespace crucible::train {

namespace {

// All-reduces `grads` (same dtype) as one flat buffer and writes the means back.
void reduce_bucket(const DistributedContext& dist, const std::vector<torch::Tensor>& grads) {
  if (grads.empty()) return;
  std::vector<torch::Tensor> flat;
  for (const auto& g : grads) flat.push_back(g.reshape({-1}));
  torch::Tensor bucket = torch::cat(flat);
  dist.allreduce(bucket, ReduceOp::kSum);
  bucket.div_(static_cast<double>(dist.size()));
  int64_t offset = 0;
  for (const auto& g : grads) {
    g.copy_(bucket.narrow(0, offset, g.numel()).view_as(g));
    offset += g.numel();
  }
}

}  // namespace

void average_gradients(const DistributedContext& dist, const std::vector<torch::Tensor>& params,
                       int64_t bucket_bytes) {
  if (dist.size() == 1) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> bucket;
  int64_t bytes = 0;
  for (const auto& p : params) {
    if (!p.requires_grad()) continue;
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    const torch::Tensor& g = p.grad();
    const int64_t size = g.numel() * static_cast<int64_t>(g.element_size());
    if (!bucket.empty() &&
        (bytes + size > bucket_bytes || bucket.front().scalar_type() != g.scalar_type())) {
      reduce_bucket(dist, bucket);
      bucket.clear();
      bytes = 0;
    }
    bucket.push_back(g);
    bytes += size;
  }
  reduce_bucket(dist, bucket);
}

void broadcast_module(const DistributedContext& dist, torch::nn::Module& module) {
  if (dist.size() == 1) return;
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters(true)) {
    torch::Tensor t = p.detach();
    dist.broadcast(t, 0);
  }
  for (auto& b : module.buffers(true)) dist.broadcast(b, 0);
}

}  // namespace crucible::train
