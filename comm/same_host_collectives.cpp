#include "comm/same_host_collectives.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "comm/comm_error.h"

namespace ooze::comm {
namespace {

// Reductions go block by block: every peer's block is read into a staging block that stays in
// cache, and the output block is written from them in one pass per rank. 256 KiB is a multiple of
// every element size; a few of them fit L2.
constexpr size_t kReduceBlockBytes = size_t{256} << 10;
constexpr size_t kPageBytes = 4096;

bool overlap(const char* a, const char* b, size_t bytes) { return a < b + bytes && b < a + bytes; }

std::vector<uint64_t> byte_offsets(const std::vector<int64_t>& counts, size_t element) {
  std::vector<uint64_t> offsets(counts.size() + 1, 0);
  for (size_t r = 0; r < counts.size(); ++r) {
    offsets[r + 1] = offsets[r] + static_cast<uint64_t>(counts[r]) * element;
  }
  return offsets;
}

// Rank r's share of `numel` elements split W ways (the last shares take the remainder).
std::vector<int64_t> even_shares(int64_t numel, int world) {
  std::vector<int64_t> counts(static_cast<size_t>(world), numel / world);
  for (int64_t r = 0; r < numel % world; ++r) ++counts[static_cast<size_t>(world - 1 - r)];
  return counts;
}

}  // namespace

SameHostCollectives::SameHostCollectives(std::unique_ptr<PeerMemory> peers)
    : peers_(std::move(peers)),
      staging_(static_cast<size_t>(peers_->size()) * kReduceBlockBytes),
      parts_(static_cast<size_t>(peers_->size())) {}

std::vector<SameHostCollectives::PeerTensor> SameHostCollectives::exchange(
    const at::Tensor& mine, const std::vector<uint64_t>& expected_bytes,
    const SameHostControl& control) const {
  const std::vector<uint64_t> words =
      control.exchange(reinterpret_cast<uint64_t>(mine.data_ptr()), mine.nbytes());
  std::vector<PeerTensor> tensors;
  for (size_t r = 0; r < expected_bytes.size(); ++r) {
    tensors.push_back(PeerTensor{words[2 * r], words[2 * r + 1]});
    if (tensors.back().bytes != expected_bytes[r]) {
      throw CommError("rank " + std::to_string(r) + " passed a tensor of " +
                      std::to_string(tensors.back().bytes) + " bytes where rank " +
                      std::to_string(peers_->rank()) + " expects " +
                      std::to_string(expected_bytes[r]) +
                      " (every rank must call with the same sizes)");
    }
  }
  return tensors;
}

void SameHostCollectives::reduce_share(char* out, const char* local,
                                       const std::vector<PeerTensor>& tensors, size_t offset_bytes,
                                       size_t bytes, size_t element, ReduceKernel kernel) {
  const int world = peers_->size(), me = peers_->rank();
  for (size_t done = 0; done < bytes; done += kReduceBlockBytes) {
    const size_t block = std::min(kReduceBlockBytes, bytes - done);
    char* into = out + done;
    for (int r = 0; r < world; ++r) {
      char* staging = staging_.data() + static_cast<size_t>(r) * kReduceBlockBytes;
      const char* part = local + offset_bytes + done;
      if (r != me) {
        peers_->read(r, tensors[static_cast<size_t>(r)].address + offset_bytes + done, staging,
                     block);
        part = staging;
      } else if (r >= 2 && overlap(into, part, block)) {
        // The output is written from the first two ranks' blocks on, before this one is added.
        std::memcpy(staging, part, block);
        part = staging;
      }
      parts_[static_cast<size_t>(r)] = part;
    }
    const size_t n = block / element;
    kernel(into, parts_[0], parts_[1], n);
    for (int r = 2; r < world; ++r) kernel(into, into, parts_[static_cast<size_t>(r)], n);
  }
}

void SameHostCollectives::all_gather(const at::Tensor& output, const at::Tensor& input,
                                     const std::vector<int64_t>& counts,
                                     const SameHostControl& control) {
  const int world = peers_->size(), me = peers_->rank();
  const size_t element = static_cast<size_t>(output.element_size());
  const std::vector<uint64_t> offsets = byte_offsets(counts, element);
  std::vector<uint64_t> expected;
  for (int64_t c : counts) expected.push_back(static_cast<uint64_t>(c) * element);
  const std::vector<PeerTensor> tensors = exchange(input, expected, control);
  char* out = static_cast<char*>(output.data_ptr());
  for (int r = 0; r < world; ++r) {
    char* into = out + offsets[static_cast<size_t>(r)];
    const size_t bytes = expected[static_cast<size_t>(r)];
    if (r != me) {
      peers_->read(r, tensors[static_cast<size_t>(r)].address, into, bytes);
    } else if (bytes > 0 && into != input.data_ptr()) {
      std::memcpy(into, input.data_ptr(), bytes);
    }
  }
  control.barrier();
}

void SameHostCollectives::reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                                         const std::vector<int64_t>& counts, ReduceKernel kernel,
                                         const SameHostControl& control) {
  const int world = peers_->size(), me = peers_->rank();
  const size_t element = static_cast<size_t>(input.element_size());
  const std::vector<uint64_t> offsets = byte_offsets(counts, element);
  const std::vector<uint64_t> expected(static_cast<size_t>(world), input.nbytes());
  const std::vector<PeerTensor> tensors = exchange(input, expected, control);
  reduce_share(static_cast<char*>(output.data_ptr()), static_cast<const char*>(input.data_ptr()),
               tensors, offsets[static_cast<size_t>(me)],
               static_cast<size_t>(counts[static_cast<size_t>(me)]) * element, element, kernel);
  control.barrier();
}

void SameHostCollectives::all_reduce(const at::Tensor& tensor, ReduceKernel kernel,
                                     const SameHostControl& control) {
  const int world = peers_->size(), me = peers_->rank();
  const size_t element = static_cast<size_t>(tensor.element_size());
  const std::vector<int64_t> counts = even_shares(tensor.numel(), world);
  const std::vector<uint64_t> offsets = byte_offsets(counts, element);
  const std::vector<uint64_t> expected(static_cast<size_t>(world), tensor.nbytes());
  const std::vector<PeerTensor> tensors = exchange(tensor, expected, control);
  char* data = static_cast<char*>(tensor.data_ptr());
  // Rank r writes only share r of its tensor while its peers read their own share of it.
  const size_t mine = offsets[static_cast<size_t>(me)];
  reduce_share(data + mine, data, tensors, mine,
               static_cast<size_t>(counts[static_cast<size_t>(me)]) * element, element, kernel);
  control.barrier();
  // Every share is final in its owner's tensor: gather them.
  for (int r = 0; r < world; ++r) {
    if (r == me) continue;
    const size_t at = offsets[static_cast<size_t>(r)];
    peers_->read(r, tensors[static_cast<size_t>(r)].address + at, data + at,
                 static_cast<size_t>(counts[static_cast<size_t>(r)]) * element);
  }
  control.barrier();
}

void SameHostCollectives::broadcast(const at::Tensor& tensor, int root,
                                    const SameHostControl& control) {
  const int world = peers_->size(), me = peers_->rank();
  const size_t bytes = tensor.nbytes();
  const std::vector<uint64_t> expected(static_cast<size_t>(world), bytes);
  const std::vector<PeerTensor> tensors = exchange(tensor, expected, control);
  // One process copies well below memory speed through the kernel, so the root works too: each
  // reader pulls the first (W-1)/W of the bytes and the root pushes the rest to every reader,
  // which gives every rank (W-1)/W of the tensor to copy.
  const size_t pulled =
      bytes / static_cast<size_t>(world) * static_cast<size_t>(world - 1) / kPageBytes * kPageBytes;
  char* data = static_cast<char*>(tensor.data_ptr());
  if (me != root) {
    peers_->read(root, tensors[static_cast<size_t>(root)].address, data, pulled);
  } else {
    for (int r = 0; r < world; ++r) {
      if (r == root || bytes == pulled) continue;
      peers_->write(r, tensors[static_cast<size_t>(r)].address + pulled, data + pulled,
                    bytes - pulled);
    }
  }
  control.barrier();
}

}  // namespace ooze::comm
