#pragma once

// The Fashion-MNIST networks of the example trials. The GPU and checkpoint benchmarks build the
// same ones, so the sizes and layers are defined here once.

#include <torch/torch.h>

namespace fashion_mnist {

// 784 -> hidden1 -> hidden2 -> 10, ReLU and dropout after each hidden layer. Takes [n, ...]
// images (flattened) and returns logits [n, 10].
struct MLPImpl : torch::nn::Module {
  MLPImpl(int64_t hidden1, int64_t hidden2, double dropout)
      : fc1(register_module("fc1", torch::nn::Linear(784, hidden1))),
        fc2(register_module("fc2", torch::nn::Linear(hidden1, hidden2))),
        out(register_module("out", torch::nn::Linear(hidden2, 10))),
        dropout(register_module("dropout", torch::nn::Dropout(dropout))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = dropout(torch::relu(fc1(x.flatten(1))));
    x = dropout(torch::relu(fc2(x)));
    return out(x);
  }

  torch::nn::Linear fc1, fc2, out;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(MLP);

// Two 3x3 convolutions (padding 1) with ReLU and 2x2 max pooling, a dense layer with dropout,
// then 10 logits. Takes [n, 1, 28, 28].
struct CNNImpl : torch::nn::Module {
  CNNImpl(int64_t filters1, int64_t filters2, int64_t hidden, double dropout)
      : conv1(register_module("conv1", conv(1, filters1))),
        conv2(register_module("conv2", conv(filters1, filters2))),
        fc(register_module("fc", torch::nn::Linear(filters2 * 7 * 7, hidden))),
        out(register_module("out", torch::nn::Linear(hidden, 10))),
        dropout(register_module("dropout", torch::nn::Dropout(dropout))) {}

  static torch::nn::Conv2d conv(int64_t in, int64_t out) {
    return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1));
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);  // 14x14
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);  // 7x7
    x = dropout(torch::relu(fc(x.flatten(1))));
    return out(x);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc, out;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(CNN);

// The network of Determined's MNIST tutorial: 3x3 convolutions (no padding) to filters1 and to
// filters2 channels with ReLU, 2x2 max pooling, 2-d dropout, a dense layer of 128 with ReLU and
// dropout, then 10 logits. Takes [n, 1, 28, 28]. (The tutorial ends in LogSoftmax and an NLL loss,
// which is cross-entropy on these logits.)
struct TutorialNetImpl : torch::nn::Module {
  TutorialNetImpl(int64_t filters1, int64_t filters2, double dropout1, double dropout2)
      : conv1(register_module("conv1", torch::nn::Conv2d(1, filters1, 3))),
        conv2(register_module("conv2", torch::nn::Conv2d(filters1, filters2, 3))),
        fc(register_module("fc", torch::nn::Linear(filters2 * 12 * 12, 128))),
        out(register_module("out", torch::nn::Linear(128, 10))),
        dropout1(register_module("dropout1", torch::nn::Dropout2d(dropout1))),
        dropout2(register_module("dropout2", torch::nn::Dropout(dropout2))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv2(torch::relu(conv1(x))));  // 24x24
    x = dropout1(torch::max_pool2d(x, 2));          // 12x12
    x = dropout2(torch::relu(fc(x.flatten(1))));
    return out(x);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc, out;
  torch::nn::Dropout2d dropout1;
  torch::nn::Dropout dropout2;
};
TORCH_MODULE(TutorialNet);

}  // namespace fashion_mnist
