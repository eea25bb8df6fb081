#include "core/cpu_memory_counter.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <utility>

namespace ooze {
namespace {

std::atomic<int64_t> in_use{0};
std::atomic<int64_t> peak{0};

// Each allocation keeps the default allocator's DataPtr and its size, so the release can both
// free it and take its bytes off the count.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) const override {
    c10::DataPtr inner = c10::GetDefaultCPUAllocator()->allocate(bytes);
    void* data = inner.get();
    auto* allocation = new Allocation{std::move(inner), static_cast<int64_t>(bytes)};
    const int64_t now = in_use.fetch_add(allocation->bytes) + allocation->bytes;
    int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    return {data, allocation, &release, c10::Device(c10::DeviceType::CPU)};
  }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

 private:
  struct Allocation {
    c10::DataPtr inner;
    int64_t bytes;
  };
  static void release(void* context) {
    auto* allocation = static_cast<Allocation*>(context);
    in_use.fetch_sub(allocation->bytes);
    delete allocation;
  }
};

}  // namespace

void install_cpu_memory_counter() {
  static CountingCpuAllocator counting;
  if (c10::GetCPUAllocator() != &counting) c10::SetCPUAllocator(&counting, /*priority=*/100);
}

int64_t cpu_bytes_in_use() { return in_use.load(); }
int64_t peak_cpu_bytes() { return peak.load(); }
void reset_peak_cpu_bytes() { peak.store(in_use.load()); }

}  // namespace ooze
