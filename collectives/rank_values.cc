// all_gather_values and the pairwise sum over ranks.
#include "collectives/rank_values.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

std::vector<double> all_gather_values(Communicator& comm, double value) {
  Device& dev = comm.device();
  Stream& stream = dev.compute_stream();
  std::vector<double> all(static_cast<std::size_t>(comm.size()));
  if (dev.kind() == DeviceKind::kCpu) {  // the device's memory is host memory
    comm.all_gather(&value, all.data(), 1, DType::kF64, stream);
    stream.synchronize();
    return all;
  }
  Buffer send = dev.allocate(8, MemCategory::kWorkspace);
  Buffer recv = dev.allocate(all.size() * 8, MemCategory::kWorkspace);
  dev.copy_from_host(send.data(), &value, 8);
  comm.all_gather(send.data(), recv.data(), 1, DType::kF64, stream);
  stream.synchronize();
  dev.copy_to_host(all.data(), recv.data(), all.size() * 8);
  return all;
}

double pairwise_sum(const double* values, int n) {
  STRATA_CHECK(n >= 1, "a sum of {} values", n);
  if (n == 1) return values[0];
  int half = 1;
  while (2 * half < n) half *= 2;
  return pairwise_sum(values, half) + pairwise_sum(values + half, n - half);
}

double sum_over_ranks(Communicator& comm, double value) {
  const std::vector<double> all = all_gather_values(comm, value);
  return pairwise_sum(all.data(), static_cast<int>(all.size()));
}

void all_agree(Communicator& comm, bool ok, const std::string& error, const std::string& what,
               const std::string& context) {
  const std::vector<double> failed = all_gather_values(comm, ok ? 0.0 : 1.0);
  std::vector<int> ranks;
  for (std::size_t r = 0; r < failed.size(); ++r)
    if (failed[r] != 0) ranks.push_back(static_cast<int>(r));
  if (ranks.empty()) return;
  if (!ok) throw Error(ErrorCode::kIo, error);
  STRATA_THROW(ErrorCode::kRemote, "{}: rank(s) {} of '{}' failed (their errors say why){}", what,
               fmt::join(ranks, ","), comm.name(), context.empty() ? std::string() : ", " + context);
}

std::string broadcast_text(Communicator& comm, const std::string& text, int root, std::size_t max_chars) {
  const std::vector<double> lengths =
      all_gather_values(comm, static_cast<double>(std::min(text.size(), max_chars)));
  const std::size_t n = static_cast<std::size_t>(lengths[static_cast<std::size_t>(root)]);
  if (n == 0) return {};
  const std::size_t words = (n + 3) / 4;  // as i32 words: every backend moves those
  std::vector<char> host(words * 4, '\0');
  if (comm.rank() == root) std::copy(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(n), host.begin());
  Device& dev = comm.device();
  Stream& stream = dev.compute_stream();
  if (dev.kind() == DeviceKind::kCpu) {
    comm.broadcast(host.data(), host.data(), words, DType::kI32, root, stream);
    stream.synchronize();
  } else {
    Buffer buf = dev.allocate(words * 4, MemCategory::kWorkspace);
    dev.copy_from_host(buf.data(), host.data(), words * 4);
    comm.broadcast(buf.data(), buf.data(), words, DType::kI32, root, stream);
    stream.synchronize();
    dev.copy_to_host(host.data(), buf.data(), words * 4);
  }
  return std::string(host.data(), n);
}

std::vector<std::string> gather_texts(Communicator& comm, const std::string& text, int root) {
  const std::vector<double> lengths = all_gather_values(comm, static_cast<double>(text.size()));
  auto words_of = [](double chars) { return (static_cast<std::size_t>(chars) + 3) / 4; };  // as i32 words
  const bool is_root = comm.rank() == root;
  std::vector<std::size_t> offset(lengths.size() + 1, 0);
  for (std::size_t r = 0; r < lengths.size(); ++r) offset[r + 1] = offset[r] + (is_root ? words_of(lengths[r]) : 0);
  std::vector<char> host((is_root ? offset.back() : words_of(lengths[static_cast<std::size_t>(comm.rank())])) * 4,
                         '\0');
  if (!is_root) std::copy(text.begin(), text.end(), host.begin());
  Device& dev = comm.device();
  Stream& stream = dev.compute_stream();
  Buffer staged;
  char* buf = host.data();
  if (dev.kind() != DeviceKind::kCpu && !host.empty()) {
    staged = dev.allocate(host.size(), MemCategory::kWorkspace);
    dev.copy_from_host(staged.data(), host.data(), host.size());
    buf = static_cast<char*>(staged.data());
  }
  std::vector<P2POp> ops;
  if (is_root) {
    for (int r = 0; r < comm.size(); ++r) {
      const std::size_t words = offset[static_cast<std::size_t>(r) + 1] - offset[static_cast<std::size_t>(r)];
      if (r != root && words > 0)
        ops.push_back(P2POp::recv(buf + offset[static_cast<std::size_t>(r)] * 4, words, DType::kI32, r));
    }
  } else if (!host.empty()) {
    ops.push_back(P2POp::send(buf, host.size() / 4, DType::kI32, root));
  }
  comm.batch_send_recv(ops, stream);
  stream.synchronize();
  if (!is_root) return {};
  if (staged.data() != nullptr) dev.copy_to_host(host.data(), staged.data(), host.size());
  std::vector<std::string> out(lengths.size());
  for (std::size_t r = 0; r < lengths.size(); ++r)
    out[r] = static_cast<int>(r) == root
                 ? text
                 : std::string(host.data() + offset[r] * 4, static_cast<std::size_t>(lengths[r]));
  return out;
}

void agree_with_root(Communicator& comm, int root, bool ok, const std::string& error) {
  const std::vector<double> failed = all_gather_values(comm, ok ? 0.0 : 1.0);
  if (failed[static_cast<std::size_t>(root)] == 0) return;
  throw Error(ErrorCode::kIo, broadcast_text(comm, error, root));
}

std::string describe_ranks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i) out += ',';
    // A run of three or more is a range; a pair is two ranks.
    if (j >= i + 2) out += fmt::format("{}-{}", ranks[i], ranks[j]);
    else if (j == i + 1) out += fmt::format("{},{}", ranks[i], ranks[j]);
    else out += fmt::format("{}", ranks[i]);
    i = j + 1;
  }
  return out;
}

}  // namespace strata
