#include "pipeline/infer/infer_shard.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/core/error.hpp"

namespace bigtrain {
namespace {

void put_u64(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

void put_text(std::string& out, const std::string& text) {
  put_u64(out, text.size());
  out += text;
}

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  bool done() const { return at_ == bytes_.size(); }
  std::uint64_t u64() {
    need(8);
    std::uint64_t value = 0;
    for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes_[at_ + static_cast<std::size_t>(i)]);
    at_ += 8;
    return value;
  }
  std::string text() {
    const std::uint64_t size = u64();
    need(size);
    std::string out = bytes_.substr(at_, size);
    at_ += size;
    return out;
  }

 private:
  void need(std::uint64_t count) const {
    if (count > bytes_.size() - at_)
      throw Error(fmt::format("gathered inference reports are truncated ({} bytes wanted at {} of {})", count, at_,
                              bytes_.size()));
  }
  const std::string& bytes_;
  std::size_t at_ = 0;
};

}  // namespace

std::string serialize_reports(const std::vector<ItemReport>& reports) {
  std::string out;
  for (const ItemReport& r : reports) {
    put_u64(out, r.index);
    put_text(out, r.out);
    put_u64(out, r.errors.size());
    for (const std::string& e : r.errors) put_text(out, e);
  }
  return out;
}

std::vector<ItemReport> deserialize_reports(const std::string& bytes) {
  std::vector<ItemReport> reports;
  Reader in(bytes);
  while (!in.done()) {
    ItemReport r;
    r.index = static_cast<std::size_t>(in.u64());
    r.out = in.text();
    const std::uint64_t errors = in.u64();
    BT_CHECK(errors <= bytes.size(), "gathered inference reports: {} error messages in {} bytes", errors, bytes.size());
    for (std::uint64_t e = 0; e < errors; ++e) r.errors.push_back(in.text());
    reports.push_back(std::move(r));
  }
  return reports;
}

std::vector<ItemReport> gather_reports(Communicator& comm, const std::vector<ItemReport>& mine) {
  if (!comm.distributed()) {
    std::vector<ItemReport> all = mine;
    std::sort(all.begin(), all.end(), [](const ItemReport& a, const ItemReport& b) { return a.index < b.index; });
    return all;
  }
  // Built from the collectives the Communicator has (no point-to-point or gatherv):
  // each rank in turn broadcasts its size, then its bytes. The text is a few hundred
  // bytes per image, so sending it to every rank instead of rank 0 alone costs nothing.
  const std::string own = serialize_reports(mine);
  std::vector<ItemReport> all;
  for (int root = 0; root < comm.size(); ++root) {
    std::uint64_t size = comm.rank() == root ? own.size() : 0;
    comm.broadcast(std::as_writable_bytes(std::span<std::uint64_t>(&size, 1)), root);
    std::string bytes = comm.rank() == root ? own : std::string(size, '\0');
    comm.broadcast(std::as_writable_bytes(std::span<char>(bytes.data(), bytes.size())), root);
    if (!comm.is_root()) continue;
    for (ItemReport& r : deserialize_reports(bytes)) all.push_back(std::move(r));
  }
  std::sort(all.begin(), all.end(), [](const ItemReport& a, const ItemReport& b) { return a.index < b.index; });
  return all;
}

}  // namespace bigtrain
