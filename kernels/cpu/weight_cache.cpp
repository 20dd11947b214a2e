#include "kernels/cpu/weight_cache.hpp"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace bigtrain::kernels::cpu {

namespace {

struct Copy {
  std::weak_ptr<const Storage> storage;
  dnnl::memory::desc desc;
  std::uint64_t version = 0;
  Tensor bytes;
};

bool same_storage(const std::weak_ptr<const Storage>& a, const std::weak_ptr<const Storage>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

class WeightCache {
 public:
  void* get(const Tensor& weight, const dnnl::memory::desc& chosen, const std::function<void(void*)>& reorder) {
    const std::lock_guard lock(mutex_);
    const std::weak_ptr<const Storage> storage = weight.storage_ref();
    // Keyed by address first: a freed storage's address may come back for another
    // tensor, which the storage identity then tells apart.
    std::vector<Copy>& copies = by_address_[weight.raw_data()];
    auto it = std::find_if(copies.begin(), copies.end(), [&](const Copy& c) { return c.desc == chosen; });
    if (it != copies.end() && !same_storage(it->storage, storage)) {
      copies.erase(it);
      it = copies.end();
    }
    if (it == copies.end()) {
      drop_expired();
      std::vector<Copy>& slot = by_address_[weight.raw_data()];  // drop_expired may have erased it
      slot.push_back({storage, chosen, weight.version(),
                      Tensor::empty({static_cast<std::int64_t>(chosen.get_size())}, DType::u8)});
      reorder(slot.back().bytes.raw_data());
      return slot.back().bytes.raw_data();
    }
    if (it->version != weight.version()) {
      reorder(it->bytes.raw_data());
      it->version = weight.version();
    }
    return it->bytes.raw_data();
  }

  std::size_t bytes() {
    const std::lock_guard lock(mutex_);
    std::size_t total = 0;
    for (const auto& [address, copies] : by_address_)
      for (const Copy& c : copies) total += c.bytes.nbytes();
    return total;
  }

  void clear() {
    const std::lock_guard lock(mutex_);
    by_address_.clear();
  }

 private:
  // Copies of weights whose tensors are gone are freed when a new copy is made:
  // a model built after another one reuses the memory.
  void drop_expired() {
    for (auto entry = by_address_.begin(); entry != by_address_.end();) {
      std::erase_if(entry->second, [](const Copy& c) { return c.storage.expired(); });
      entry = entry->second.empty() ? by_address_.erase(entry) : std::next(entry);
    }
  }

  std::mutex mutex_;
  std::unordered_map<const void*, std::vector<Copy>> by_address_;
};

WeightCache& cache() {
  static WeightCache instance;
  return instance;
}

}  // namespace

void* cached_weights(const Tensor& weight, const dnnl::memory::desc& chosen,
                     const std::function<void(void* target)>& reorder) {
  return cache().get(weight, chosen, reorder);
}

std::size_t cached_weight_bytes() { return cache().bytes(); }

void clear_weight_cache() { cache().clear(); }

}  // namespace bigtrain::kernels::cpu
