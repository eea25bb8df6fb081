#include "comm/same_host_collectives.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
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
      parts_(static_cast<size_t>(peers_->size())),
      cores_(static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN))) {}

std::vector<SameHostCollectives::PeerTensor> SameHostCollectives::exchange(
    const at::Tensor& mine, const std::vector<uint64_t>& expected_bytes,
    const SameHostControl& control) {
  const std::optional<UnnamedSegmentPlace> place =
      find_unnamed_segment(mine.data_ptr(), mine.nbytes());
  const std::vector<uint64_t> words = control.exchange({
      reinterpret_cast<uint64_t>(mine.data_ptr()),
      mine.nbytes(),
      place ? static_cast<uint64_t>(place->descriptor) + 1 : 0,  // 0: not in a segment
      place ? place->inode : 0,
      place ? place->offset : 0,
      place ? static_cast<uint64_t>(place->size) : 0,
  });
  constexpr size_t kWords = 6;
  std::vector<PeerTensor> tensors;
  for (size_t r = 0; r < expected_bytes.size(); ++r) {
    const uint64_t* w = words.data() + kWords * r;
    PeerTensor tensor{w[0], w[1], w[2] != 0, nullptr};
    if (tensor.bytes != expected_bytes[r]) {
      throw CommError(
          "rank " + std::to_string(r) + " passed a tensor of " + std::to_string(tensor.bytes) +
          " bytes where rank " + std::to_string(peers_->rank()) + " expects " +
          std::to_string(expected_bytes[r]) + " (every rank must call with the same sizes)");
    }
    if (tensor.in_segment && static_cast<int>(r) != peers_->rank()) {
      const UnnamedSegmentPlace peer_place{static_cast<int>(w[2] - 1), w[3], w[4],
                                           static_cast<int64_t>(w[5])};
      tensor.mapped = peers_->map_segment(static_cast<int>(r), peer_place);
    }
    tensors.push_back(tensor);
  }
  return tensors;
}

void SameHostCollectives::copy_from(int peer, const PeerTensor& tensor, size_t offset, void* into,
                                    size_t bytes) const {
  if (tensor.mapped) {
    std::memcpy(into, tensor.mapped + offset, bytes);
  } else {
    peers_->read(peer, tensor.address + offset, into, bytes);
  }
}

void SameHostCollectives::copy_to(int peer, const PeerTensor& tensor, size_t offset,
                                  const void* from, size_t bytes) const {
  if (tensor.mapped) {
    std::memcpy(tensor.mapped + offset, from, bytes);
  } else {
    peers_->write(peer, tensor.address + offset, from, bytes);
  }
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
      const PeerTensor& peer = tensors[static_cast<size_t>(r)];
      if (r != me && peer.mapped) {
        part = peer.mapped + offset_bytes + done;
      } else if (r != me) {
        peers_->read(r, peer.address + offset_bytes + done, staging, block);
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
      copy_from(r, tensors[static_cast<size_t>(r)], 0, into, bytes);
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
    copy_from(r, tensors[static_cast<size_t>(r)], at, data + at,
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
  const PeerTensor& source = tensors[static_cast<size_t>(root)];
  char* data = static_cast<char*>(tensor.data_ptr());
  // Each reader pulls the first (W-1)/W of the bytes and the root pushes the rest to every
  // reader, which gives every rank (W-1)/W of the tensor to copy: every rank works, and one
  // process alone copies well below memory speed through the kernel. Except where the readers
  // copy from a mapping of the root's segment, at memory speed, while the root would push
  // through the kernel: there each reader copies it all. A rank decides from what every rank
  // published, so the root and its readers agree.
  const size_t split =
      bytes / static_cast<size_t>(world) * static_cast<size_t>(world - 1) / kPageBytes * kPageBytes;
  const bool root_helps = world <= cores_;
  auto pulled_by = [&](int reader) {
    if (!root_helps) return bytes;
    return source.in_segment && !tensors[static_cast<size_t>(reader)].in_segment ? bytes : split;
  };
  if (me != root) {
    copy_from(root, source, 0, data, pulled_by(me));
  } else {
    for (int r = 0; r < world; ++r) {
      const size_t pulled = pulled_by(r);
      if (r == root || pulled == bytes) continue;
      copy_to(r, tensors[static_cast<size_t>(r)], pulled, data + pulled, bytes - pulled);
    }
  }
  control.barrier();
}

}  // namespace ooze::comm
