// CudaIpcBuffer between real processes: a child (this binary re-executed with --cuda-ipc-child,
// so it starts with no CUDA state) opens the parent's handle, reads what the parent wrote and
// writes back, and every mapping it opens is closed. On a machine without a GPU, or with a
// CPU-only LibTorch, the GPU tests skip; the error tests run everywhere.
#include "weight_sync/cuda_ipc_buffer.h"

#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/support/child_role.h"
#include "tests/support/expect_error.h"
#include "tests/support/process.h"

namespace ooze::weight_sync {
namespace cuda_ipc_buffer_test {

using ooze::testing::error_message_of;

constexpr char kChildFlag[] = "--cuda-ipc-child";
constexpr int64_t kBytes = 3 * 1024 * 1024 + 5;  // several pages, not a multiple of any
constexpr std::chrono::milliseconds kChildTimeout{120000};
constexpr int kReopenRounds = 20;

// Two byte patterns, written with plain loops and checked against tensor ops.
uint8_t first_byte(int64_t i) { return static_cast<uint8_t>((i * 31 + 7) % 256); }
uint8_t second_byte(int64_t i) { return static_cast<uint8_t>((i * 13 + 101) % 256); }

at::Tensor expected_first(int64_t n) {
  return at::arange(n, at::kLong).mul(31).add(7).remainder(256).to(at::kByte);
}
at::Tensor expected_second(int64_t n) {
  return at::arange(n, at::kLong).mul(13).add(101).remainder(256).to(at::kByte);
}

at::Tensor host_bytes(int64_t n, uint8_t (*byte)(int64_t)) {
  at::Tensor bytes = at::empty({n}, at::kByte);
  uint8_t* data = bytes.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i) data[i] = byte(i);
  return bytes;
}

// Handles are binary; argv carries them as hex.
std::string to_hex(const std::string& bytes) {
  std::string hex;
  char pair[3];
  for (char c : bytes) {
    std::snprintf(pair, sizeof(pair), "%02x", static_cast<unsigned char>(c));
    hex += pair;
  }
  return hex;
}

std::string from_hex(const std::string& hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return bytes;
}

// Why the GPU tests cannot run here, or "" when they can.
std::string gpu_missing() {
  if (!CudaIpcBuffer::built_with_cuda()) return "ooze was built without the CUDA runtime";
  if (!at::hasCUDA()) return "LibTorch has no CUDA, or no CUDA device is visible";
  return "";
}

#define REQUIRE_GPU()                              \
  do {                                             \
    const std::string missing = gpu_missing();     \
    if (!missing.empty()) GTEST_SKIP() << missing; \
  } while (0)

struct ChildRun {
  ooze::testing::ExitStatus status;
  std::string output;
};

// Runs this binary as a child in role `role` with `args` and waits for it.
ChildRun run_child(const std::string& role, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {ooze::testing::self_executable(), kChildFlag, role};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string log = ooze::testing::make_temp_dir("cuda-ipc") + "/child.log";
  ooze::testing::Process child(argv, {{"OMP_NUM_THREADS", "1"}}, log);
  ChildRun run;
  run.status = child.wait(kChildTimeout);
  run.output = child.output();
  return run;
}

std::vector<std::string> open_args(const std::string& handle, int64_t nbytes) {
  return {to_hex(handle), std::to_string(nbytes), "0"};
}

#define EXPECT_CHILD_OK(run)                                 \
  EXPECT_TRUE((run).status.exited && (run).status.code == 0) \
      << "child: " << (run).status.describe() << "\n"        \
      << (run).output

// ---- the child's side ----

#define CHILD_CHECK(condition)                                                  \
  do {                                                                          \
    if (!(condition)) {                                                         \
      std::cout << "FAIL at line " << __LINE__ << ": " #condition << std::endl; \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

// Opens the parent's buffer, checks the first pattern, shares and keeps mappings as documented,
// writes the second pattern, and closes every handle (many times over).
int child_read_and_overwrite(const std::string& handle, int64_t nbytes, int device) {
  CHILD_CHECK(CudaIpcBuffer::open_handles() == 0);
  CudaIpcBuffer buffer = CudaIpcBuffer::open(handle, nbytes, device);
  CHILD_CHECK(CudaIpcBuffer::open_handles() == 1);
  CHILD_CHECK(!buffer.is_creator() && buffer.size() == nbytes && buffer.device() == device);
  CHILD_CHECK(buffer.handle() == handle && buffer.data() != nullptr);
  at::Tensor view = buffer.as_tensor();
  CHILD_CHECK(view.is_cuda() && view.device().index() == device);
  CHILD_CHECK(view.scalar_type() == at::kByte && view.dim() == 1 && view.numel() == nbytes);
  CHILD_CHECK(view.data_ptr() == buffer.data());
  CHILD_CHECK(at::equal(view.cpu(), expected_first(nbytes)));

  {  // A second open in this process shares the mapping.
    CudaIpcBuffer again = CudaIpcBuffer::open(handle, nbytes, device);
    CHILD_CHECK(CudaIpcBuffer::open_handles() == 1 && again.data() == buffer.data());
  }
  CHILD_CHECK(CudaIpcBuffer::open_handles() == 1);

  // The view keeps the mapping after the buffer goes; writes reach the creator.
  CudaIpcBuffer moved = std::move(buffer);
  CHILD_CHECK(buffer.size() == 0 && buffer.device() == -1 && buffer.handle().empty());
  CHILD_CHECK(buffer.data() == nullptr);
  moved = CudaIpcBuffer();
  CHILD_CHECK(CudaIpcBuffer::open_handles() == 1);
  view.copy_(host_bytes(nbytes, second_byte));  // synchronous: done before this process exits
  view.reset();
  CHILD_CHECK(CudaIpcBuffer::open_handles() == 0);

  // Many syncs' worth of open and close leak nothing.
  for (int round = 0; round < kReopenRounds; ++round) {
    CudaIpcBuffer reopened = CudaIpcBuffer::open(handle, nbytes, device);
    CHILD_CHECK(CudaIpcBuffer::open_handles() == 1);
    CHILD_CHECK(at::equal(reopened.as_tensor().narrow(0, nbytes - 4096, 4096).cpu(),
                          expected_second(nbytes).narrow(0, nbytes - 4096, 4096)));
  }
  CHILD_CHECK(CudaIpcBuffer::open_handles() == 0);
  std::cout << "child ok" << std::endl;
  return 0;
}

int child_read(const std::string& handle, int64_t nbytes, int device) {
  {
    CudaIpcBuffer buffer = CudaIpcBuffer::open(handle, nbytes, device);
    CHILD_CHECK(at::equal(buffer.as_tensor().cpu(), expected_first(nbytes)));
  }
  CHILD_CHECK(CudaIpcBuffer::open_handles() == 0);
  std::cout << "child ok" << std::endl;
  return 0;
}

// Prints the IoError that opening throws; fails when the open succeeds.
int child_expect_open_failure(const std::string& handle, int64_t nbytes, int device) {
  try {
    CudaIpcBuffer buffer = CudaIpcBuffer::open(handle, nbytes, device);
  } catch (const IoError& e) {
    CHILD_CHECK(CudaIpcBuffer::open_handles() == 0);
    std::cout << "IoError: " << e.what() << std::endl;
    return 0;
  }
  std::cout << "FAIL: the handle opened" << std::endl;
  return 1;
}

// Creates a buffer, prints its handle and exits without releasing anything, as a crash would.
int child_create_and_exit(int64_t nbytes, int device) {
  CudaIpcBuffer buffer = CudaIpcBuffer::create(nbytes, device);
  buffer.as_tensor().copy_(host_bytes(nbytes, first_byte));
  std::cout << "handle " << to_hex(buffer.handle()) << std::endl;
  std::_Exit(0);
}

int run_child_role(const std::vector<std::string>& args) {
  at::set_num_threads(1);
  try {
    const std::string& role = args.at(0);
    if (role == "create-and-exit") return child_create_and_exit(std::stoll(args.at(1)), 0);
    const std::string handle = from_hex(args.at(1));
    const int64_t nbytes = std::stoll(args.at(2));
    const int device = std::stoi(args.at(3));
    if (role == "read-and-overwrite") return child_read_and_overwrite(handle, nbytes, device);
    if (role == "read") return child_read(handle, nbytes, device);
    if (role == "expect-open-failure") return child_expect_open_failure(handle, nbytes, device);
    std::cout << "FAIL: unknown role " << role << std::endl;
  } catch (const std::exception& e) {
    std::cout << "FAIL: " << e.what() << std::endl;
  }
  return 2;
}

// ---- everywhere ----

TEST(CudaIpcBuffer, CreateWithoutCudaRuntimeOrDeviceThrowsAClearError) {
  if (!CudaIpcBuffer::built_with_cuda()) {
    std::string message = error_message_of<IoError>([] { CudaIpcBuffer::create(1024, 0); });
    EXPECT_CONTAINS(message, "cannot create a CUDA IPC buffer of 1024 bytes on CUDA device 0");
    EXPECT_CONTAINS(message, "built without CUDA");
    EXPECT_CONTAINS(message, "CUDA toolkit");
    message = error_message_of<IoError>(
        [] { CudaIpcBuffer::open(std::string(CudaIpcBuffer::handle_bytes(), 'x'), 1024, 0); });
    EXPECT_CONTAINS(message, "cannot open a CUDA IPC buffer of 1024 bytes on CUDA device 0");
    EXPECT_CONTAINS(message, "built without CUDA");
    return;
  }
  // With the runtime: a device index beyond any machine's fails alike with or without a GPU.
  std::string message = error_message_of<IoError>([] { CudaIpcBuffer::create(1024, 4096); });
  EXPECT_CONTAINS(message, "cannot create a CUDA IPC buffer of 1024 bytes on CUDA device 4096");
  EXPECT_CONTAINS(message, "CUDA_VISIBLE_DEVICES");
  try {
    CudaIpcBuffer buffer = CudaIpcBuffer::create(1024, 0);
    EXPECT_EQ(buffer.size(), 1024);  // a device is visible: creating succeeds
  } catch (const IoError& e) {
    EXPECT_CONTAINS(e.what(), "cannot create a CUDA IPC buffer of 1024 bytes on CUDA device 0");
    EXPECT_CONTAINS(e.what(), "no CUDA device is visible to this process");
    EXPECT_CONTAINS(e.what(), "nvidia-smi");
  }
  EXPECT_EQ(CudaIpcBuffer::open_handles(), 0);
}

TEST(CudaIpcBuffer, RefusesANegativeSizeAndHandlesItDidNotMake) {
  if (!CudaIpcBuffer::built_with_cuda()) GTEST_SKIP() << "ooze was built without the CUDA runtime";
  EXPECT_CONTAINS(error_message_of<IoError>([] { CudaIpcBuffer::create(-1, 0); }),
                  "a buffer holds zero or more bytes");
  // Checked before any device is touched, so these run without a GPU.
  for (const std::string& garbage :
       {std::string(), std::string(64, '\x01'), std::string(CudaIpcBuffer::handle_bytes(), 'x'),
        std::string(CudaIpcBuffer::handle_bytes() + 1, '\0')}) {
    std::string message = error_message_of<IoError>([&] { CudaIpcBuffer::open(garbage, 1024, 0); });
    EXPECT_CONTAINS(message, "cannot open a CUDA IPC buffer of 1024 bytes on CUDA device 0");
    EXPECT_CONTAINS(message, "(" + std::to_string(garbage.size()) + " bytes) is not one");
    EXPECT_CONTAINS(message, "CudaIpcBuffer::handle()");
  }
  EXPECT_EQ(CudaIpcBuffer::open_handles(), 0);
}

// The children of the GPU tests get handles through argv: binary bytes, NULs included, arrive
// whole and the child's error comes back.
TEST(CudaIpcBuffer, AChildGetsTheHandleBytesWholeAndReportsItsError) {
  if (!CudaIpcBuffer::built_with_cuda()) GTEST_SKIP() << "ooze was built without the CUDA runtime";
  std::string garbage(CudaIpcBuffer::handle_bytes() - 1, '\0');
  garbage[7] = '\xff';
  ChildRun child = run_child("expect-open-failure", open_args(garbage, 1024));
  EXPECT_CHILD_OK(child);
  EXPECT_NE(child.output.find("IoError: cannot open a CUDA IPC buffer of 1024 bytes on CUDA "
                              "device 0: the handle (" +
                              std::to_string(garbage.size()) + " bytes) is not one"),
            std::string::npos)
      << child.output;
}

TEST(CudaIpcBuffer, DefaultConstructedHoldsNothing) {
  CudaIpcBuffer buffer;
  EXPECT_EQ(buffer.size(), 0);
  EXPECT_EQ(buffer.device(), -1);
  EXPECT_EQ(buffer.data(), nullptr);
  EXPECT_TRUE(buffer.handle().empty());
  EXPECT_FALSE(buffer.is_creator());
  at::Tensor view = buffer.as_tensor();
  EXPECT_EQ(view.numel(), 0);
  EXPECT_EQ(view.scalar_type(), at::kByte);
}

// ---- on a GPU ----

TEST(CudaIpcBuffer, AChildReadsWhatTheCreatorWroteAndItsWritesComeBack) {
  REQUIRE_GPU();
  CudaIpcBuffer buffer = CudaIpcBuffer::create(kBytes, 0);
  EXPECT_TRUE(buffer.is_creator());
  EXPECT_EQ(buffer.size(), kBytes);
  EXPECT_EQ(buffer.device(), 0);
  EXPECT_EQ(buffer.handle().size(), CudaIpcBuffer::handle_bytes());
  at::Tensor view = buffer.as_tensor();
  ASSERT_TRUE(view.is_cuda());
  EXPECT_EQ(view.device().index(), 0);
  EXPECT_EQ(view.numel(), kBytes);
  EXPECT_EQ(view.data_ptr(), buffer.data());
  view.copy_(host_bytes(kBytes, first_byte));
  EXPECT_EQ(CudaIpcBuffer::open_handles(), 0);  // creating opens nothing

  ChildRun child = run_child("read-and-overwrite", open_args(buffer.handle(), kBytes));
  EXPECT_CHILD_OK(child);
  EXPECT_NE(child.output.find("child ok"), std::string::npos) << child.output;
  // The child's writes went to this memory, not to a copy.
  EXPECT_TRUE(at::equal(buffer.as_tensor().cpu(), expected_second(kBytes)));
}

TEST(CudaIpcBuffer, OpenRefusesASizeMismatchAndTheCreatorsOwnBuffer) {
  REQUIRE_GPU();
  CudaIpcBuffer buffer = CudaIpcBuffer::create(4096, 0);
  std::string message =
      error_message_of<IoError>([&] { CudaIpcBuffer::open(buffer.handle(), 4097, 0); });
  EXPECT_CONTAINS(message, "cannot open a CUDA IPC buffer of 4097 bytes on CUDA device 0");
  EXPECT_CONTAINS(message, "names a buffer of 4096 bytes");
  EXPECT_CONTAINS(message, "disagree on the size");
  message = error_message_of<IoError>([&] { CudaIpcBuffer::open(buffer.handle(), 4096, 0); });
  EXPECT_CONTAINS(message, "this process created the buffer");
  EXPECT_EQ(CudaIpcBuffer::open_handles(), 0);

  // In a child, the same size mismatch is refused before CUDA is asked.
  ChildRun child = run_child("expect-open-failure", open_args(buffer.handle(), 4095));
  EXPECT_CHILD_OK(child);
  EXPECT_NE(child.output.find("names a buffer of 4096 bytes"), std::string::npos) << child.output;
}

TEST(CudaIpcBuffer, AZeroByteBufferHasAHandleAndMapsNothing) {
  REQUIRE_GPU();
  CudaIpcBuffer buffer = CudaIpcBuffer::create(0, 0);
  EXPECT_EQ(buffer.data(), nullptr);
  EXPECT_EQ(buffer.handle().size(), CudaIpcBuffer::handle_bytes());
  EXPECT_EQ(buffer.as_tensor().numel(), 0);
  EXPECT_TRUE(buffer.as_tensor().is_cuda());
  CudaIpcBuffer opened = CudaIpcBuffer::open(buffer.handle(), 0, 0);
  EXPECT_EQ(opened.size(), 0);
  EXPECT_EQ(CudaIpcBuffer::open_handles(), 0);
}

TEST(CudaIpcBuffer, ADamagedHandleFailsWithCudasReason) {
  REQUIRE_GPU();
  CudaIpcBuffer buffer = CudaIpcBuffer::create(kBytes, 0);
  std::string damaged = buffer.handle();
  for (size_t i = damaged.size() - 64; i < damaged.size(); ++i) damaged[i] ^= 0x5a;  // CUDA's part
  ChildRun child = run_child("expect-open-failure", open_args(damaged, kBytes));
  EXPECT_CHILD_OK(child);
  EXPECT_NE(child.output.find("cannot open a CUDA IPC buffer of " + std::to_string(kBytes) +
                              " bytes on CUDA device 0: cudaIpcOpenMemHandle failed"),
            std::string::npos)
      << child.output;
  EXPECT_NE(child.output.find("ask the creator for a fresh handle"), std::string::npos)
      << child.output;
}

TEST(CudaIpcBuffer, TheCreatorsMemoryLivesUntilItsLastViewGoes) {
  REQUIRE_GPU();
  CudaIpcBuffer buffer = CudaIpcBuffer::create(kBytes, 0);
  const std::string handle = buffer.handle();
  at::Tensor view = buffer.as_tensor();
  view.copy_(host_bytes(kBytes, first_byte));
  buffer = CudaIpcBuffer();
  ChildRun child = run_child("read", open_args(handle, kBytes));
  EXPECT_CHILD_OK(child);  // the view kept the allocation
  view.reset();            // the last reference: cudaFree
  child = run_child("expect-open-failure", open_args(handle, kBytes));
  EXPECT_CHILD_OK(child);
  EXPECT_NE(child.output.find("may have freed the buffer"), std::string::npos) << child.output;
}

TEST(CudaIpcBuffer, AHandleOfAnExitedCreatorFailsAndSaysSo) {
  REQUIRE_GPU();
  ChildRun creator = run_child("create-and-exit", {std::to_string(kBytes)});
  EXPECT_CHILD_OK(creator);
  const size_t start = creator.output.find("handle ");
  ASSERT_NE(start, std::string::npos) << creator.output;
  const size_t end = creator.output.find('\n', start);
  const std::string handle = from_hex(creator.output.substr(start + 7, end - start - 7));
  ASSERT_EQ(handle.size(), CudaIpcBuffer::handle_bytes());
  std::string message = error_message_of<IoError>([&] { CudaIpcBuffer::open(handle, kBytes, 0); });
  EXPECT_CONTAINS(message, "cudaIpcOpenMemHandle failed");
  EXPECT_CONTAINS(message, "exited");
  EXPECT_CONTAINS(message, "ask the trainer for new buffers");
  EXPECT_EQ(CudaIpcBuffer::open_handles(), 0);
}

TEST(CudaIpcBuffer, AHandleFromAnotherGpuIsRefused) {
  REQUIRE_GPU();
  if (at::detail::getCUDAHooks().getNumGPUs() < 2) GTEST_SKIP() << "needs two CUDA devices";
  CudaIpcBuffer buffer = CudaIpcBuffer::create(4096, 0);
  std::string message =
      error_message_of<IoError>([&] { CudaIpcBuffer::open(buffer.handle(), 4096, 1); });
  EXPECT_CONTAINS(message, "cannot open a CUDA IPC buffer of 4096 bytes on CUDA device 1");
  EXPECT_CONTAINS(message, "the handle is from another GPU");
  EXPECT_CONTAINS(message, "GPU-");
  EXPECT_EQ(CudaIpcBuffer::open_handles(), 0);
}

// tests/support/test_main.cpp runs the child when this executable starts with kChildFlag.
const bool kChildRoleRegistered = ooze::testing::register_child_role(kChildFlag, run_child_role);

}  // namespace cuda_ipc_buffer_test
}  // namespace ooze::weight_sync
