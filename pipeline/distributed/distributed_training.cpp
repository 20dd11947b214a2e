#include "pipeline/distributed/distributed_training.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "pipeline/common/atomic_file.hpp"

namespace bigtrain {
namespace {

// Host view of a float tensor: the tensor itself on the CPU, a copy otherwise.
Tensor host_f32(const Tensor& tensor, const std::string& name) {
  BT_CHECK(tensor.dtype() == DType::f32, "{}: distributed training supports f32 state only", name);
  return tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
}

void store_back(Tensor& tensor, const Tensor& host) {
  if (!tensor.device().is_cpu()) tensor.copy_from(host);
}

}  // namespace

EpochShard shard_epoch(const std::vector<std::size_t>& order, std::int64_t images_per_step, int rank_index,
                       int rank_count) {
  BT_CHECK(images_per_step > 0, "images_per_step must be positive");
  BT_CHECK(rank_count > 0 && rank_index >= 0 && rank_index < rank_count, "rank {} of {}", rank_index, rank_count);
  const auto ranks = static_cast<std::size_t>(rank_count);
  const auto rank = static_cast<std::size_t>(rank_index);
  const auto step = static_cast<std::size_t>(images_per_step);
  EpochShard shard;
  shard.images_per_step.assign((order.size() + step - 1) / step, 0);
  for (std::size_t position = 0; position < order.size(); ++position) {
    // Round robin inside each step: a step's images are spread evenly (the last,
    // short step too), and one rank is never left with all the big images of a step.
    if ((position % step) % ranks != rank) continue;
    shard.images.push_back(order[position]);
    shard.positions.push_back(position);
    ++shard.images_per_step[position / step];
  }
  return shard;
}

std::vector<std::size_t> shard_indices(std::size_t count, int rank, int ranks) {
  BT_CHECK(ranks > 0 && rank >= 0 && rank < ranks, "rank {} of {}", rank, ranks);
  std::vector<std::size_t> mine;
  for (std::size_t i = static_cast<std::size_t>(rank); i < count; i += static_cast<std::size_t>(ranks))
    mine.push_back(i);
  return mine;
}

void broadcast_state(Communicator& comm, const std::vector<net::StateRefs>& state) {
  if (!comm.distributed()) return;
  for (const auto& refs : state) {
    auto send = [&](Tensor& value, const std::string& name) {
      Tensor host = host_f32(value, name);
      comm.broadcast({static_cast<std::byte*>(host.raw_data()), host.nbytes()}, 0);
      store_back(value, host);
    };
    for (net::Parameter* p : refs.parameters) send(p->value, p->name);
    for (net::Buffer* b : refs.buffers) send(b->value, b->name);
    for (net::Counter* c : refs.counters)
      comm.broadcast({reinterpret_cast<std::byte*>(&c->value), sizeof(c->value)}, 0);
  }
}

GradientAllreduce::GradientAllreduce(std::vector<net::Parameter*> params) : params_(std::move(params)) {
  for (const net::Parameter* p : params_) elements_ += static_cast<std::size_t>(p->value.numel());
}

void GradientAllreduce::sum(Communicator& comm) {
  if (!comm.distributed()) return;
  // Every rank must send the same layout: a parameter without a gradient yet (none
  // of this rank's images reached it) contributes zeros.
  for (net::Parameter* p : params_)
    if (!p->grad.defined()) p->zero_grad();
  if (sum_on_device(comm)) return;
  if (!logged_path_) {
    spdlog::info("gradient allreduce: {}{}", comm.description(),
                 !params_.empty() && !params_.front()->grad.device().is_cpu()
                     ? nccl_available() ? " on host copies of the GPU gradients"
                                        : " on host copies of the GPU gradients (this build has no NCCL)"
                     : "");
    logged_path_ = true;
  }
  flat_.resize(elements_);
  std::size_t offset = 0;
  std::vector<Tensor> hosts;
  hosts.reserve(params_.size());
  for (net::Parameter* p : params_) {
    hosts.push_back(host_f32(p->grad, p->name));
    const auto n = static_cast<std::size_t>(hosts.back().numel());
    std::memcpy(flat_.data() + offset, hosts.back().raw_data(), n * sizeof(float));
    offset += n;
  }
  comm.allreduce_sum(std::span<float>(flat_));
  offset = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto n = static_cast<std::size_t>(hosts[i].numel());
    std::memcpy(hosts[i].raw_data(), flat_.data() + offset, n * sizeof(float));
    store_back(params_[i]->grad, hosts[i]);
    offset += n;
  }
}

bool GradientAllreduce::sum_on_device(Communicator& comm) {
  if (params_.empty()) return false;
  const Device device = params_.front()->grad.device();
  if (!device.is_cuda()) return false;
  std::vector<DeviceBuffer> buffers;
  buffers.reserve(params_.size());
  for (net::Parameter* p : params_) {
    // One communicator per rank and device: a model split over devices or dtypes
    // would need one per device; the trainer puts the whole model on one.
    BT_CHECK(p->grad.device() == device, "{}: gradient on {}, the others on {}", p->name, p->grad.device().str(),
             device.str());
    BT_CHECK(p->grad.dtype() == DType::f32, "{}: distributed training supports f32 gradients only", p->name);
    buffers.push_back({p->grad.data<float>(), static_cast<std::size_t>(p->grad.numel())});
  }
  if (!comm.allreduce_sum_on_device(buffers, device)) return false;
  if (!logged_path_) {
    spdlog::info("gradient allreduce: {} on {} ({:.2f} MB per step)", comm.device_description(), device.str(),
                 static_cast<double>(bytes()) / 1e6);
    logged_path_ = true;
  }
  return true;
}

void average_buffers(Communicator& comm, const std::vector<net::StateRefs>& state) {
  if (!comm.distributed()) return;
  std::vector<std::pair<net::Buffer*, Tensor>> hosts;
  std::size_t total = 0;
  for (const auto& refs : state)
    for (net::Buffer* b : refs.buffers) {
      hosts.emplace_back(b, host_f32(b->value, b->name));
      total += static_cast<std::size_t>(b->value.numel());
    }
  if (total == 0) return;
  std::vector<float> flat(total);
  std::size_t offset = 0;
  for (auto& [buffer, host] : hosts) {
    std::memcpy(flat.data() + offset, host.raw_data(), host.nbytes());
    offset += static_cast<std::size_t>(host.numel());
  }
  comm.allreduce_sum(std::span<float>(flat));
  const float scale = 1.0f / static_cast<float>(comm.size());
  offset = 0;
  for (auto& [buffer, host] : hosts) {
    auto* values = static_cast<float*>(host.raw_data());
    for (std::int64_t i = 0; i < host.numel(); ++i) values[i] = flat[offset + static_cast<std::size_t>(i)] * scale;
    store_back(buffer->value, host);
    offset += static_cast<std::size_t>(host.numel());
  }
}

void gather_image_results(Communicator& comm, const std::vector<std::size_t>& positions, std::size_t total,
                          std::size_t num_classes, std::vector<int>& labels,
                          std::vector<std::vector<float>>& probabilities, std::vector<double>& losses) {
  if (!comm.distributed()) return;
  BT_CHECK(labels.size() == positions.size() && probabilities.size() == positions.size() &&
               losses.size() == positions.size(),
           "gather_image_results: {} positions for {} results", positions.size(), labels.size());
  // One row per image: [present, label, loss, probabilities...]; each image is one
  // rank's, so the sum over ranks is a gather (in double: labels stay exact).
  const std::size_t width = 3 + num_classes;
  std::vector<double> rows(total * width, 0.0);
  for (std::size_t i = 0; i < positions.size(); ++i) {
    double* row = rows.data() + positions[i] * width;
    row[0] = 1.0;
    row[1] = labels[i];
    row[2] = losses[i];
    BT_CHECK(probabilities[i].size() == num_classes, "image with {} probabilities, expected {}",
             probabilities[i].size(), num_classes);
    for (std::size_t c = 0; c < num_classes; ++c) row[3 + c] = probabilities[i][c];
  }
  comm.allreduce_sum(std::span<double>(rows));
  labels.clear();
  probabilities.clear();
  losses.clear();
  for (std::size_t p = 0; p < total; ++p) {
    const double* row = rows.data() + p * width;
    if (row[0] == 0.0) continue;  // an image no rank finished (not expected; tolerated like a skipped image)
    labels.push_back(static_cast<int>(std::lround(row[1])));
    losses.push_back(row[2]);
    probabilities.emplace_back(row + 3, row + width);
  }
}

std::int64_t sum_over_ranks(Communicator& comm, std::int64_t value) {
  double v = static_cast<double>(value);  // exact below 2^53
  comm.allreduce_sum(std::span<double>(&v, 1));
  return static_cast<std::int64_t>(std::llround(v));
}

void write_weights_digest_if_asked(const Communicator& comm, const std::vector<net::StateRefs>& state) {
  const char* dir = std::getenv("BIGTRAIN_WEIGHTS_DIGEST_DIR");
  if (dir == nullptr || *dir == '\0') return;
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a 64
  std::int64_t values = 0;
  auto add = [&](const Tensor& tensor) {
    const Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
    const auto* bytes = static_cast<const unsigned char*>(host.raw_data());
    for (std::size_t i = 0; i < host.nbytes(); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
    values += host.numel();
  };
  for (const auto& refs : state) {
    for (const net::Parameter* p : refs.parameters) add(p->value);
    for (const net::Buffer* b : refs.buffers) add(b->value);
  }
  std::filesystem::create_directories(dir);
  write_file_atomically((std::filesystem::path(dir) / fmt::format("weights.rank{}.txt", comm.rank())).string(),
                        fmt::format("{:016x} {} values\n", hash, values));
}

}  // namespace bigtrain
