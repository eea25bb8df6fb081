// The argument rules both backends share (comm/collective_checks.h), exercised one at a time:
// each rejection is a CommError whose message names the operation, the argument and the group,
// and each rule accepts the calls that are right.
//
// The NCCL device rule is checked on CUDA tensors that only carry metadata (at::for_blob over host
// memory with a CUDA target device): the rule reads the device and nothing else, so this needs
// neither a GPU nor a CUDA LibTorch.
#include "comm/collective_checks.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "comm/comm_error.h"
#include "comm/reduce_kernels.h"

namespace ooze {
namespace comm {
namespace collective_checks_test {

// The message of the CommError `call` throws; a test failure (and "") when it throws none.
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const CommError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a CommError";
  return "";
}

// `message` starts with "<op> in group '<group>' (rank r of n): " and contains every fragment.
void expect_message(const std::string& message, const std::string& op, const CollectiveChecks& on,
                    const std::vector<std::string>& fragments) {
  const std::string prefix = op + " in group '" + on.group() + "' (rank " +
                             std::to_string(on.rank()) + " of " + std::to_string(on.size()) + "): ";
  EXPECT_EQ(message.rfind(prefix, 0), 0u)
      << "'" << message << "' should start with '" << prefix << "'";
  for (const std::string& fragment : fragments) {
    EXPECT_NE(message.find(fragment), std::string::npos)
        << "'" << fragment << "' missing from: " << message;
  }
}

// A CUDA tensor of 8 floats on `index` that is never dereferenced.
at::Tensor cuda_metadata_tensor(int index) {
  static float host[8] = {};
  return at::for_blob(host, {8})
      .options(at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, index))
      .target_device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index)))
      .make_tensor();
}

// Gloo's rules as rank 1 of 4 in group "trainers" (rank, size and group all tell apart in the
// messages), NCCL's as rank 0 of 2 on cuda:2.
class CollectiveChecksTest : public ::testing::Test {
 protected:
  const CollectiveChecks gloo_{"trainers", 1, 4, DeviceRule::cpu()};
  const CollectiveChecks nccl_{"weights/sync", 0, 2, DeviceRule::cuda(2)};
};

TEST_F(CollectiveChecksTest, FailNamesTheOperationTheGroupAndTheRank) {
  EXPECT_EQ(error_of([&] { gloo_.fail("barrier", "something is wrong"); }),
            "barrier in group 'trainers' (rank 1 of 4): something is wrong");
}

TEST_F(CollectiveChecksTest, UndefinedAndSparseTensorsAreRejected) {
  expect_message(error_of([&] { gloo_.placed("all_gather", "input", at::Tensor()); }), "all_gather",
                 gloo_, {"input is an undefined tensor"});
  at::Tensor sparse = at::ones({4}).to_sparse();
  expect_message(error_of([&] { gloo_.placed("all_reduce(sum)", "tensor", sparse); }),
                 "all_reduce(sum)", gloo_, {"tensor is a Sparse tensor", "dense"});
  expect_message(error_of([&] { nccl_.placed("broadcast", "tensor", sparse); }), "broadcast", nccl_,
                 {"tensor is a Sparse tensor", "dense"});
}

TEST_F(CollectiveChecksTest, GlooRuleTakesCpuTensorsOnly) {
  gloo_.placed("all_reduce(sum)", "tensor", at::ones({3}));
  expect_message(
      error_of([&] { gloo_.placed("all_reduce(sum)", "tensor", cuda_metadata_tensor(0)); }),
      "all_reduce(sum)", gloo_, {"tensor is on cuda:0", "Gloo backend takes CPU tensors"});
}

TEST_F(CollectiveChecksTest, NcclRuleTakesCudaTensorsOnItsOwnDevice) {
  nccl_.placed("all_reduce", "tensor", cuda_metadata_tensor(2));
  expect_message(error_of([&] { nccl_.placed("all_reduce", "tensor", at::ones({8})); }),
                 "all_reduce", nccl_,
                 {"tensor is on cpu", "NCCL backend needs CUDA tensors on cuda:2"});
  expect_message(
      error_of([&] { nccl_.placed("reduce_scatter", "output", cuda_metadata_tensor(7)); }),
      "reduce_scatter", nccl_, {"output is on cuda:7", "this communicator uses cuda:2"});
  EXPECT_TRUE(nccl_.device().is_cuda());
  EXPECT_EQ(nccl_.device().cuda_index(), 2);
  EXPECT_FALSE(gloo_.device().is_cuda());
}

TEST_F(CollectiveChecksTest, NonContiguousTensorsAreRejected) {
  at::Tensor transposed = at::zeros({4, 3}).t();
  ASSERT_FALSE(transposed.is_contiguous());
  expect_message(error_of([&] { gloo_.contiguous("recv(from 0, tag 0)", "tensor", transposed); }),
                 "recv(from 0, tag 0)", gloo_,
                 {"tensor float32 [3, 4] is not contiguous", "tensor.contiguous()"});
  gloo_.contiguous("recv(from 0, tag 0)", "tensor", transposed.contiguous());
  gloo_.contiguous("recv(from 0, tag 0)", "tensor", at::zeros({0}));
}

TEST_F(CollectiveChecksTest, OutputAndInputMustShareADtype) {
  expect_message(
      error_of([&] { gloo_.same_dtype("all_gather", at::zeros({8}, at::kInt), at::zeros({2})); }),
      "all_gather", gloo_, {"output dtype int32 does not match input dtype float32"});
  expect_message(error_of([&] {
                   nccl_.same_dtype("all_gather_v", at::zeros({8}, at::kBFloat16),
                                    at::zeros({2}, at::kDouble));
                 }),
                 "all_gather_v", nccl_,
                 {"output dtype bfloat16 does not match input dtype float64"});
  gloo_.same_dtype("all_gather", at::zeros({8}, at::kHalf), at::zeros({2}, at::kHalf));
}

TEST_F(CollectiveChecksTest, DtypesThatAnOpCannotReduceAreRejected) {
  expect_message(error_of([&] {
                   gloo_.reducible("all_reduce(avg)", "tensor", at::zeros({4}, at::kInt),
                                   ReduceOp::AVG);
                 }),
                 "all_reduce(avg)", gloo_,
                 {"tensor has dtype int32", "reduce op avg needs a floating-point dtype"});
  expect_message(error_of([&] {
                   nccl_.reducible("reduce_scatter_v", "input", at::zeros({4}, at::kBool),
                                   ReduceOp::SUM);
                 }),
                 "reduce_scatter_v", nccl_,
                 {"input has dtype Bool", "reduce op sum cannot reduce", "float32"});
  expect_message(error_of([&] {
                   gloo_.reducible("all_reduce(max)", "tensor", at::zeros({4}, at::kComplexFloat),
                                   ReduceOp::MAX);
                 }),
                 "all_reduce(max)", gloo_, {"tensor has dtype ComplexFloat", "max"});
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kInt,
                               at::kLong, at::kChar, at::kByte}) {
    for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::MIN, ReduceOp::AVG}) {
      const bool allowed = op != ReduceOp::AVG || at::isFloatingType(dtype);
      bool threw = false;
      try {
        gloo_.reducible("all_reduce", "tensor", at::zeros({1}, dtype), op);
      } catch (const CommError&) {
        threw = true;
      }
      EXPECT_EQ(threw, !allowed) << dtype_name(dtype) << " " << reduce_op_name(op);
    }
  }
}

// The Gloo backend takes its CPU kernels for exactly the dtypes the shared rule lets through.
TEST(CollectiveChecks, ReducibleDtypesAreTheOnesWithCpuKernels) {
  for (int i = 0; i < static_cast<int>(at::ScalarType::NumOptions); ++i) {
    const auto dtype = static_cast<at::ScalarType>(i);
    bool has_kernel = true;
    try {
      reduce_kernel(dtype, ReduceOp::SUM);
    } catch (const CommError&) {
      has_kernel = false;
    }
    EXPECT_EQ(is_reducible_dtype(dtype), has_kernel) << c10::toString(dtype);
  }
}

TEST(CollectiveChecks, DtypeNamesAreNcclsForCarriedDtypes) {
  EXPECT_EQ(dtype_name(at::kFloat), "float32");
  EXPECT_EQ(dtype_name(at::kDouble), "float64");
  EXPECT_EQ(dtype_name(at::kHalf), "float16");
  EXPECT_EQ(dtype_name(at::kBFloat16), "bfloat16");
  EXPECT_EQ(dtype_name(at::kInt), "int32");
  EXPECT_EQ(dtype_name(at::kLong), "int64");
  EXPECT_EQ(dtype_name(at::kChar), "int8");
  EXPECT_EQ(dtype_name(at::kByte), "uint8");
  EXPECT_EQ(dtype_name(at::kBool), "Bool");
}

TEST_F(CollectiveChecksTest, PeersMustBeRanksOfTheGroup) {
  for (int peer : {-1, 4, 100}) {
    expect_message(
        error_of([&] { gloo_.peer("send(to x)", "destination", peer); }), "send(to x)", gloo_,
        {"destination " + std::to_string(peer) + " is out of range", "the group has ranks 0..3"});
  }
  expect_message(error_of([&] { nccl_.peer("broadcast", "root", 2); }), "broadcast", nccl_,
                 {"root 2 is out of range", "ranks 0..1"});
  for (int peer = 0; peer < 4; ++peer) gloo_.peer("recv", "source", peer);
}

TEST_F(CollectiveChecksTest, EvenVariantsNeedSizeTimesThePart) {
  expect_message(
      error_of([&] {
        gloo_.even_split("all_gather", "output", at::zeros({9}), "input", at::zeros({2}));
      }),
      "all_gather", gloo_, {"output has 9 elements; expected 4 ranks x 2 input elements = 8"});
  expect_message(error_of([&] {
                   gloo_.even_split("reduce_scatter(sum)", "input", at::zeros({7}), "output",
                                    at::zeros({2}));
                 }),
                 "reduce_scatter(sum)", gloo_, {"input has 7 elements", "2 output elements"});
  gloo_.even_split("all_gather", "output", at::zeros({8}), "input", at::zeros({2}));
  gloo_.even_split("all_gather", "output", at::zeros({0}), "input", at::zeros({0}));
}

TEST_F(CollectiveChecksTest, CountsNeedOneEntryPerRankAddingUpToTheTensors) {
  const at::Tensor whole = at::zeros({10});
  const at::Tensor own = at::zeros({2});  // rank 1's share
  auto counts_error = [&](std::vector<int64_t> counts, const at::Tensor& w, const at::Tensor& o) {
    return error_of([&] { gloo_.counts("all_gather_v", counts, "output", w, "input", o); });
  };
  expect_message(counts_error({1, 2, 3}, whole, own), "all_gather_v", gloo_,
                 {"counts has 3 entries, but the group has 4 ranks"});
  expect_message(counts_error({1, -2, 3, 8}, whole, own), "all_gather_v", gloo_,
                 {"counts[1] is negative (-2)"});
  expect_message(counts_error({1, 2, 3, 5}, whole, own), "all_gather_v", gloo_,
                 {"output has 10 elements, but counts sum to 11"});
  expect_message(counts_error({1, 3, 3, 3}, whole, own), "all_gather_v", gloo_,
                 {"input has 2 elements, but counts[1] is 3"});
  gloo_.counts("all_gather_v", {1, 2, 3, 4}, "output", whole, "input", own);
  gloo_.counts("all_gather_v", {0, 0, 0, 0}, "output", at::zeros({0}), "input", at::zeros({0}));
}

}  // namespace collective_checks_test
}  // namespace comm
}  // namespace ooze
