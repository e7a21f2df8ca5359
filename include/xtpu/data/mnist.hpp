// xtpu/data/mnist.hpp — MNIST-format image classification sets (Fashion-MNIST, MNIST).
//
// Provides: image_classification<Pixels>(images_file, labels_file) -> dataset<tensor<float,
// Pixels>, tensor<int32_t>> (pixels scaled to [0, 1] as torchvision's ToTensor does, labels as
// int32); fashion_mnist(split, dir) reading Debian's dataset-fashion-mnist files
// (`train-images-idx3-ubyte.gz`, ...; the same names without .gz are read too), with dir
// defaulting to $XTPU_FASHION_MNIST, else /usr/share/datasets/fashion-mnist;
// fashion_mnist_classes (the ten class names).
// Shape rule: the images file is (N, H, W) uint8 with H × W = Pixels (or (N, Pixels)); the
// labels file is (N) uint8 with the same N.
// Errors: data_error — read_idx's, and images of another size or a label count that differs
// from the image count (both files named). Labels are kept as they are (any uint8).
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "xtpu/data/dataset.hpp"
#include "xtpu/data/idx.hpp"
#include "xtpu/error.hpp"

namespace xtpu::data {

/// Images (N, H, W) or (N, Pixels) uint8 and labels (N) uint8 in two IDX files (plain or gzip).
template <std::size_t Pixels>
dataset<tensor<float, Pixels>, tensor<std::int32_t>> image_classification(const std::string& images_file,
                                                                           const std::string& labels_file) {
  const xt::xarray<std::uint8_t> images = read_idx<std::uint8_t>(images_file);
  const xt::xarray<std::uint8_t> labels = read_idx<std::uint8_t>(labels_file);
  const auto& s = images.shape();
  const std::size_t per_image = images.size() / s[0];
  if (s.size() < 2 || per_image != Pixels) {
    const std::vector<std::size_t> dims(s.begin(), s.end());
    throw data_error("xtpu: '" + images_file + "' holds images of shape " + xtpu::detail::shape_text(dims) + ": expected " +
                     std::to_string(Pixels) + " pixels per image");
  }
  if (labels.dimension() != 1 || labels.size() != s[0]) {
    throw data_error("xtpu: '" + labels_file + "' holds " + std::to_string(labels.size()) + " labels in " +
                     std::to_string(labels.dimension()) + " dimension(s) for the " + std::to_string(s[0]) +
                     " images of '" + images_file + "'");
  }
  std::vector<float> x(images.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(images.data()[i]) / 255.0f;
  return {std::move(x), std::vector<std::int32_t>(labels.begin(), labels.end())};
}

enum class split { train, test };

/// Fashion-MNIST's class names, by label.
inline constexpr std::array<std::string_view, 10> fashion_mnist_classes = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

/// Where fashion_mnist looks by default: $XTPU_FASHION_MNIST, else Debian's package's folder.
inline std::string fashion_mnist_dir() {
  const char* env = std::getenv("XTPU_FASHION_MNIST");
  return env != nullptr && *env ? env : "/usr/share/datasets/fashion-mnist";
}

/// Fashion-MNIST's training (60,000) or test (10,000) set: 784 pixels in [0, 1], labels 0..9.
inline dataset<tensor<float, 784>, tensor<std::int32_t>> fashion_mnist(split which, const std::string& dir = fashion_mnist_dir()) {
  const std::string stem = which == split::train ? "train" : "t10k";
  const auto file = [&](const char* kind) {
    const std::string plain = dir + "/" + stem + "-" + kind + "-idx" + (kind[0] == 'i' ? "3" : "1") + "-ubyte";
    const auto exists = [](const std::string& path) {
      std::FILE* f = std::fopen(path.c_str(), "rb");
      return f != nullptr && std::fclose(f) == 0;
    };
    return exists(plain + ".gz") || !exists(plain) ? plain + ".gz" : plain;
  };
  return image_classification<784>(file("images"), file("labels"));
}

}  // namespace xtpu::data
