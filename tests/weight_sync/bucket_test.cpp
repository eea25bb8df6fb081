#include "weight_sync/bucket.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cereal/archives/binary.hpp>
#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/vector.hpp>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "models/transformer.h"
#include "tests/support/expect_error.h"

namespace ooze::weight_sync {
namespace bucket_test {

using ooze::testing::error_message_of;

TensorSpec spec(const std::string& name, at::ScalarType dtype, std::vector<int64_t> shape) {
  return TensorSpec{name, dtype, std::move(shape)};
}

// fp32 tensor of `bytes` bytes (a multiple of 4).
TensorSpec fp32_bytes(const std::string& name, int64_t bytes) {
  return spec(name, at::kFloat, {bytes / 4});
}

std::vector<std::vector<std::string>> names_per_bucket(const std::vector<BucketManifest>& plan) {
  std::vector<std::vector<std::string>> names;
  for (const BucketManifest& bucket : plan) {
    names.emplace_back();
    for (const BucketEntry& entry : bucket.entries) names.back().push_back(entry.name);
  }
  return names;
}

using Names = std::vector<std::vector<std::string>>;

int64_t round_up_256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// --- planning ------------------------------------------------------------------------------

TEST(PlanBuckets, TensorsFillingABucketExactlyShareIt) {
  // Four slots of 256 bytes fill 1024 exactly; the fifth opens a second bucket.
  std::vector<TensorSpec> specs;
  for (int i = 0; i < 5; ++i) specs.push_back(fp32_bytes("t" + std::to_string(i), 256));
  std::vector<BucketManifest> plan = plan_buckets(specs, 1024);
  EXPECT_EQ(names_per_bucket(plan), (Names{{"t0", "t1", "t2", "t3"}, {"t4"}}));
  EXPECT_EQ(plan[0].nbytes, 1024);
  EXPECT_EQ(plan[1].nbytes, 256);
  EXPECT_EQ(plan[0].index, 0);
  EXPECT_EQ(plan[1].index, 1);
}

TEST(PlanBuckets, OneByteOverTheLimitOpensANewBucket) {
  // 4 x 256 = 1024 is one byte over 1023.
  std::vector<TensorSpec> specs;
  for (int i = 0; i < 4; ++i) specs.push_back(fp32_bytes("t" + std::to_string(i), 256));
  EXPECT_EQ(names_per_bucket(plan_buckets(specs, 1023)), (Names{{"t0", "t1", "t2"}, {"t3"}}));

  // 768 + 256 fits 1024 exactly; 768 + 260 bytes (a 512-byte slot) does not.
  EXPECT_EQ(names_per_bucket(plan_buckets({fp32_bytes("a", 768), fp32_bytes("b", 256)}, 1024)),
            (Names{{"a", "b"}}));
  EXPECT_EQ(names_per_bucket(plan_buckets({fp32_bytes("a", 768), fp32_bytes("b", 260)}, 1024)),
            (Names{{"a"}, {"b"}}));
}

TEST(PlanBuckets, ATensorLargerThanABucketTravelsAlone) {
  std::vector<TensorSpec> specs = {fp32_bytes("small0", 100), fp32_bytes("big", 5000),
                                   fp32_bytes("small1", 100), fp32_bytes("small2", 100)};
  std::vector<BucketManifest> plan = plan_buckets(specs, 1024);
  EXPECT_EQ(names_per_bucket(plan), (Names{{"small0"}, {"big"}, {"small1", "small2"}}));
  EXPECT_EQ(plan[1].nbytes, round_up_256(5000));
  EXPECT_EQ(plan[1].entries[0].offset, 0);
  EXPECT_EQ(plan[1].entries[0].nbytes, 5000);

  // Oversized first and last, and two oversized in a row.
  EXPECT_EQ(names_per_bucket(plan_buckets(
                {fp32_bytes("b0", 4096), fp32_bytes("b1", 4096), fp32_bytes("s", 4)}, 1024)),
            (Names{{"b0"}, {"b1"}, {"s"}}));
  EXPECT_EQ(names_per_bucket(plan_buckets({fp32_bytes("s", 4), fp32_bytes("b", 4096)}, 1024)),
            (Names{{"s"}, {"b"}}));
}

TEST(PlanBuckets, ManyTinyTensorsFillBucketsSlotBySlot) {
  // 1000 one-element tensors: each takes a 256-byte slot, so ten fit in 2560 bytes.
  std::vector<TensorSpec> specs;
  for (int i = 0; i < 1000; ++i) specs.push_back(spec("w" + std::to_string(i), at::kFloat, {1}));
  std::vector<BucketManifest> plan = plan_buckets(specs, 2560);
  ASSERT_EQ(plan.size(), 100u);
  for (size_t b = 0; b < plan.size(); ++b) {
    EXPECT_EQ(plan[b].index, static_cast<int64_t>(b));
    EXPECT_EQ(plan[b].nbytes, 2560);
    ASSERT_EQ(plan[b].entries.size(), 10u);
    for (size_t e = 0; e < 10; ++e) {
      EXPECT_EQ(plan[b].entries[e].name, "w" + std::to_string(b * 10 + e));
      EXPECT_EQ(plan[b].entries[e].offset, static_cast<int64_t>(e) * 256);
      EXPECT_EQ(plan[b].entries[e].nbytes, 4);
    }
  }
}

TEST(PlanBuckets, ZeroElementTensorsAreCarriedAndNoBucketIsEmpty) {
  std::vector<TensorSpec> specs = {spec("empty0", at::kBFloat16, {0, 8}), fp32_bytes("a", 1024),
                                   spec("empty1", at::kFloat, {0}), fp32_bytes("b", 1024),
                                   spec("empty2", at::kLong, {3, 0})};
  std::vector<BucketManifest> plan = plan_buckets(specs, 1024);
  EXPECT_EQ(names_per_bucket(plan), (Names{{"empty0", "a", "empty1"}, {"b", "empty2"}}));
  for (const BucketManifest& bucket : plan) {
    EXPECT_FALSE(bucket.entries.empty());
    for (const BucketEntry& entry : bucket.entries) {
      EXPECT_LE(entry.offset + entry.nbytes, bucket.nbytes);
    }
  }
  EXPECT_EQ(plan[0].entries[0].nbytes, 0);
  EXPECT_EQ(plan[0].entries[0].shape, (std::vector<int64_t>{0, 8}));
  // Only zero-element tensors: one bucket of zero bytes that still lists them.
  std::vector<BucketManifest> empties = plan_buckets({spec("e", at::kFloat, {0})}, 1);
  ASSERT_EQ(empties.size(), 1u);
  EXPECT_EQ(empties[0].nbytes, 0);
  EXPECT_TRUE(plan_buckets({}, 1024).empty());
}

TEST(PlanBuckets, RefusesBadSizesAndNames) {
  std::vector<TensorSpec> ok = {fp32_bytes("a", 4)};
  EXPECT_CONTAINS(error_message_of([&] { plan_buckets(ok, 0); }), "update_weight_buffer_size = 0");
  EXPECT_CONTAINS(error_message_of([&] { plan_buckets(ok, -5); }), "positive");
  EXPECT_CONTAINS(
      error_message_of([] {
        plan_buckets({fp32_bytes("a", 4), fp32_bytes("b", 4), fp32_bytes("a", 8)}, 1024);
      }),
      "tensor 2 'a' appears twice");
  EXPECT_CONTAINS(error_message_of([] {
                    plan_buckets({fp32_bytes("a", 4), spec("", at::kFloat, {1})}, 1024);
                  }),
                  "tensor 1 has an empty name");
  EXPECT_CONTAINS(error_message_of([] {
                    plan_buckets({spec("neg", at::kFloat, {2, -1})}, 1024);
                  }),
                  "'neg' has shape [2, -1]");
  const int64_t huge = int64_t{1} << 40;
  EXPECT_CONTAINS(error_message_of([&] {
                    plan_buckets({spec("huge", at::kFloat, {huge, huge})}, 1024);
                  }),
                  "too many bytes");
  EXPECT_CONTAINS(error_message_of([] { plan_buckets({spec("c", at::kComplexFloat, {2})}, 1024); }),
                  "'c' has dtype");
}

TEST(PlanBuckets, GroupsByDtypeInFixedOrderWithAlignedOffsets) {
  // Hugging Face order, dtypes mixed; everything fits one bucket.
  std::vector<TensorSpec> specs = {
      spec("norm_a", at::kFloat, {3}),   spec("w_a", at::kBFloat16, {5, 7}),
      spec("step", at::kLong, {1}),      spec("h", at::kHalf, {9}),
      spec("w_b", at::kBFloat16, {300}), spec("norm_b", at::kFloat, {2, 2}),
      spec("mask", at::kBool, {17}),     spec("w_c", at::kBFloat16, {1}),
      spec("ids", at::kInt, {4}),        spec("d", at::kDouble, {2}),
      spec("bytes", at::kByte, {3}),     spec("shorts", at::kShort, {5}),
      spec("chars", at::kChar, {6})};
  std::vector<BucketManifest> plan = plan_buckets(specs, 1 << 20);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(names_per_bucket(plan), (Names{{"w_a", "w_b", "w_c", "h", "norm_a", "norm_b", "d",
                                            "step", "ids", "shorts", "chars", "bytes", "mask"}}));
  const BucketManifest& bucket = plan[0];
  int64_t expected_offset = 0;
  for (const BucketEntry& entry : bucket.entries) {
    EXPECT_EQ(entry.offset, expected_offset) << entry.name;
    EXPECT_EQ(entry.offset % 256, 0) << entry.name;
    int64_t numel = 1;
    for (int64_t size : entry.shape) numel *= size;
    EXPECT_EQ(entry.nbytes, numel * static_cast<int64_t>(c10::elementSize(entry.dtype)));
    expected_offset += round_up_256(entry.nbytes);
  }
  EXPECT_EQ(bucket.nbytes, expected_offset);
  EXPECT_EQ(bucket_dtype_order(), (std::vector<at::ScalarType>{
                                      at::kBFloat16, at::kHalf, at::kFloat, at::kDouble, at::kLong,
                                      at::kInt, at::kShort, at::kChar, at::kByte, at::kBool}));
}

// --- packing -------------------------------------------------------------------------------

// The buffer pack_into must produce, built independently: each tensor's contiguous bytes
// memcpy'd at its entry's offset, zeros elsewhere.
std::vector<uint8_t> expected_bytes(const BucketManifest& manifest,
                                    const std::vector<at::Tensor>& tensors) {
  std::vector<uint8_t> bytes(manifest.nbytes, 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    at::Tensor contiguous = tensors[i].contiguous();
    EXPECT_EQ(contiguous.numel() * contiguous.element_size(), manifest.entries[i].nbytes);
    if (manifest.entries[i].nbytes > 0) {
      std::memcpy(bytes.data() + manifest.entries[i].offset, contiguous.data_ptr(),
                  manifest.entries[i].nbytes);
    }
  }
  return bytes;
}

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor ca = a.contiguous(), cb = b.contiguous();
  const size_t n = ca.numel() * ca.element_size();
  return n == static_cast<size_t>(cb.numel() * cb.element_size()) &&
         (n == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), n) == 0);
}

struct Mixed {
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;  // Hugging Face order
};

// fp32, bf16, fp16, int64 and bool tensors, several of them non-contiguous, one holding NaN,
// infinities and -0.0 (compared by bytes).
Mixed mixed_tensors() {
  at::manual_seed(3);
  Mixed m;
  auto add = [&](const std::string& name, at::Tensor tensor) {
    m.names.push_back(name);
    m.tensors.push_back(tensor);
  };
  add("fp32.special",
      at::tensor({std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), -0.0f, 1e-40f, 3.5f}));
  add("bf16.transposed", at::randn({6, 10}).to(at::kBFloat16).t());
  add("fp16.strided", at::randn({8, 9}).to(at::kHalf).slice(1, 1, 9, 2));
  add("int64.plain", at::randint(-(int64_t{1} << 40), int64_t{1} << 40, {13}, at::kLong));
  add("fp32.expanded", at::randn({1, 5}).expand({4, 5}));
  add("bf16.plain", at::randn({3, 129}).to(at::kBFloat16));
  add("bool.mask", at::randn({11}) > 0);
  add("fp32.scalar", at::randn({}));
  add("fp16.empty", at::empty({0, 3}, at::kHalf));
  add("int64.column", at::arange(40, at::kLong).view({8, 5}).select(1, 2));
  return m;
}

std::vector<TensorSpec> specs_of(const Mixed& m) {
  std::vector<TensorSpec> specs;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    specs.push_back({m.names[i], m.tensors[i].scalar_type(), m.tensors[i].sizes().vec()});
  }
  return specs;
}

// The tensors of `m` in `bucket`'s entry order.
std::vector<at::Tensor> in_entry_order(const Mixed& m, const BucketManifest& bucket) {
  std::map<std::string, at::Tensor> by_name;
  for (size_t i = 0; i < m.names.size(); ++i) by_name[m.names[i]] = m.tensors[i];
  std::vector<at::Tensor> ordered;
  for (const BucketEntry& entry : bucket.entries) ordered.push_back(by_name.at(entry.name));
  return ordered;
}

TEST(PackBucket, PackThenUnpackGivesBackEveryTensorBitForBit) {
  Mixed m = mixed_tensors();
  ASSERT_FALSE(m.tensors[1].is_contiguous());
  ASSERT_FALSE(m.tensors[2].is_contiguous());
  // One bucket holding everything, and buckets small enough to split the list.
  for (int64_t max_bytes : {int64_t{1} << 20, int64_t{512}, int64_t{1}}) {
    SCOPED_TRACE("max_bytes " + std::to_string(max_bytes));
    std::vector<BucketManifest> plan = plan_buckets(specs_of(m), max_bytes);
    std::set<std::string> seen;
    for (const BucketManifest& bucket : plan) {
      std::vector<at::Tensor> inputs = in_entry_order(m, bucket);
      at::Tensor buffer = pack_bucket(bucket, inputs);
      ASSERT_EQ(buffer.numel(), bucket.nbytes);
      std::vector<uint8_t> expected = expected_bytes(bucket, inputs);
      ASSERT_EQ(std::memcmp(buffer.data_ptr(), expected.data(), expected.size()), 0)
          << "bucket " << bucket.index;

      std::vector<std::pair<std::string, at::Tensor>> unpacked = unpack_bucket(bucket, buffer);
      ASSERT_EQ(unpacked.size(), inputs.size());
      for (size_t i = 0; i < unpacked.size(); ++i) {
        const auto& [name, tensor] = unpacked[i];
        EXPECT_EQ(name, bucket.entries[i].name);
        EXPECT_EQ(tensor.scalar_type(), inputs[i].scalar_type()) << name;
        EXPECT_EQ(tensor.sizes(), inputs[i].sizes()) << name;
        EXPECT_TRUE(same_bytes(tensor, inputs[i])) << name;
        if (name != "fp32.special") {
          EXPECT_TRUE(at::equal(tensor, inputs[i])) << name;
        }
        seen.insert(name);
      }
    }
    EXPECT_EQ(seen.size(), m.names.size());
  }
}

TEST(PackBucket, PackIntoOverwritesAReusedBufferIncludingPadding) {
  Mixed m = mixed_tensors();
  BucketManifest bucket = plan_buckets(specs_of(m), 1 << 20).at(0);
  std::vector<at::Tensor> inputs = in_entry_order(m, bucket);
  at::Tensor buffer = at::full({bucket.nbytes}, 0xAB, at::kByte);  // stale bytes everywhere
  pack_into(bucket, inputs, buffer);
  std::vector<uint8_t> expected = expected_bytes(bucket, inputs);
  EXPECT_EQ(std::memcmp(buffer.data_ptr(), expected.data(), expected.size()), 0);
}

TEST(PackBucket, FloatingTensorsAreConvertedToTheirEntrysDtypeAsTheyAreCopied) {
  // fp32 master weights packed for a bf16 engine: the bytes are those of Tensor::to's rounding.
  const BucketManifest bucket =
      plan_buckets({spec("w", at::kBFloat16, {37, 45}), spec("n", at::kFloat, {5})}, 1 << 20).at(0);
  // Large enough for the conversion's vector loop, not only its head and tail.
  at::Tensor w = at::randn({37, 45}, at::kFloat) * 3, n = at::randn({5}, at::kDouble);
  const auto unpacked = unpack_bucket(bucket, pack_bucket(bucket, {w, n}));
  ASSERT_EQ(unpacked.size(), 2u);
  const at::Tensor expected_w = w.to(at::kBFloat16), expected_n = n.to(at::kFloat);
  for (const auto& [name, tensor] : unpacked) {
    const at::Tensor& expected = name == "w" ? expected_w : expected_n;
    ASSERT_EQ(tensor.scalar_type(), expected.scalar_type()) << name;
    EXPECT_EQ(std::memcmp(tensor.data_ptr(), expected.data_ptr(), expected.nbytes()), 0) << name;
  }
}

TEST(UnpackBucket, TensorsAreViewsOfTheBuffer) {
  Mixed m = mixed_tensors();
  BucketManifest bucket = plan_buckets(specs_of(m), 1 << 20).at(0);
  at::Tensor buffer = pack_bucket(bucket, in_entry_order(m, bucket));
  const uint8_t* base = buffer.data_ptr<uint8_t>();
  std::vector<std::pair<std::string, at::Tensor>> unpacked = unpack_bucket(bucket, buffer);
  for (size_t i = 0; i < unpacked.size(); ++i) {
    const at::Tensor& view = unpacked[i].second;
    EXPECT_TRUE(view.is_contiguous());
    if (view.numel() == 0) continue;
    EXPECT_EQ(static_cast<const uint8_t*>(view.data_ptr()), base + bucket.entries[i].offset);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(view.data_ptr()) % 64, 0u)
        << "CPU allocations are 64-byte aligned, and offsets multiples of 256";
  }
  // Writing the buffer shows through the views, and the views keep the storage alive.
  size_t bf16_index = 0;
  while (unpacked[bf16_index].first != "bf16.plain") ++bf16_index;
  buffer.narrow(0, bucket.entries[bf16_index].offset, bucket.entries[bf16_index].nbytes).zero_();
  at::Tensor bf16 = unpacked[bf16_index].second;
  buffer.reset();
  unpacked.clear();
  EXPECT_TRUE(at::equal(bf16, at::zeros({3, 129}, at::kBFloat16)));
}

TEST(PackBucket, TensorsAskedForOneAtATimeMayShareTheMemoryTheyView) {
  // As the trainer packs: each tensor is a view of one scratch buffer that the next one
  // overwrites, so each must be copied before the next is asked for, in the caller's order.
  Mixed m = mixed_tensors();
  const BucketManifest bucket = plan_buckets(specs_of(m), 1 << 20).at(0);
  const std::vector<at::Tensor> inputs = in_entry_order(m, bucket);
  size_t largest = 0;
  for (const at::Tensor& input : inputs) largest = std::max(largest, input.nbytes());
  at::Tensor scratch = at::empty({static_cast<int64_t>(largest)}, at::kByte);
  std::vector<size_t> order(inputs.size());
  std::iota(order.rbegin(), order.rend(), 0);  // last entry first
  std::vector<size_t> asked;
  at::Tensor buffer = at::full({bucket.nbytes}, 0xAB, at::kByte);
  pack_into(
      bucket, order,
      [&](size_t i) {
        asked.push_back(i);
        const at::Tensor& input = inputs[i];
        at::Tensor view =
            scratch.narrow(0, 0, static_cast<int64_t>(input.nbytes())).view(input.scalar_type());
        view = view.view(input.sizes());
        view.copy_(input);
        return view;
      },
      buffer);
  EXPECT_EQ(asked, order);
  const std::vector<uint8_t> expected = expected_bytes(bucket, inputs);
  EXPECT_EQ(std::memcmp(buffer.data_ptr(), expected.data(), expected.size()), 0);

  const auto tensor_of = [&](size_t i) { return inputs[i]; };
  std::vector<size_t> twice = order;
  twice.back() = twice.front();
  EXPECT_CONTAINS(error_message_of<Error>([&] { pack_into(bucket, twice, tensor_of, buffer); }),
                  "names entry " + std::to_string(order.front()) + " twice");
  EXPECT_CONTAINS(error_message_of<Error>([&] {
                    pack_into(bucket, {order.begin(), order.end() - 1}, tensor_of, buffer);
                  }),
                  "names " + std::to_string(order.size() - 1) + " of its " +
                      std::to_string(order.size()) + " entries");
}

TEST(PackBucket, RefusesTensorsThatDoNotMatchTheirEntries) {
  BucketManifest bucket =
      plan_buckets({spec("a", at::kBFloat16, {2, 3}), spec("b", at::kFloat, {4})}, 1 << 20).at(0);
  bucket.index = 7;
  at::Tensor a = at::zeros({2, 3}, at::kBFloat16), b = at::zeros({4});
  std::string message = error_message_of<Error>([&] { pack_bucket(bucket, {a, b.to(at::kInt)}); });
  EXPECT_CONTAINS(message, "bucket 7, entry 1 'b'");
  EXPECT_CONTAINS(message, "expected float32 [4] but got int32 [4]");
  EXPECT_CONTAINS(error_message_of<Error>([&] {
                    pack_bucket(bucket, {a.t(), b});
                  }),
                  "entry 0 'a': expected bfloat16 [2, 3] but got bfloat16 [3, 2]");
  EXPECT_CONTAINS(error_message_of<Error>([&] { pack_bucket(bucket, {a}); }),
                  "got 1 tensors for its 2 entries");
  EXPECT_CONTAINS(error_message_of<Error>([&] {
                    pack_bucket(bucket, {a, at::Tensor()});
                  }),
                  "an undefined tensor");

  at::Tensor short_buffer = at::empty({bucket.nbytes - 1}, at::kByte);
  EXPECT_CONTAINS(error_message_of<FormatError>([&] {
                    pack_into(bucket, {a, b}, short_buffer);
                  }),
                  "packing weight-sync bucket 7: the buffer has " +
                      std::to_string(bucket.nbytes - 1) + " bytes");
  at::Tensor float_buffer = at::empty({bucket.nbytes}, at::kFloat);
  EXPECT_CONTAINS(error_message_of<FormatError>([&] {
                    pack_into(bucket, {a, b}, float_buffer);
                  }),
                  "must be a contiguous 1-D uint8 tensor");
}

TEST(UnpackBucket, RefusesBuffersThatDoNotFitTheManifest) {
  BucketManifest bucket =
      plan_buckets({spec("a", at::kFloat, {2}), spec("b", at::kFloat, {3})}, 1 << 20).at(0);
  bucket.index = 4;
  EXPECT_CONTAINS(error_message_of<FormatError>(
                      [&] { unpack_bucket(bucket, at::zeros({bucket.nbytes + 256}, at::kByte)); }),
                  "unpacking weight-sync bucket 4: the buffer has");
  at::Tensor strided = at::zeros({bucket.nbytes * 2}, at::kByte).slice(0, 0, bucket.nbytes * 2, 2);
  EXPECT_CONTAINS(error_message_of<FormatError>([&] { unpack_bucket(bucket, strided); }),
                  "(non-contiguous)");
  EXPECT_CONTAINS(error_message_of<FormatError>([&] { unpack_bucket(bucket, at::Tensor()); }),
                  "undefined");
  // One byte into a larger allocation: float32 entries cannot be viewed there.
  at::Tensor shifted = at::zeros({bucket.nbytes + 1}, at::kByte).narrow(0, 1, bucket.nbytes);
  EXPECT_CONTAINS(error_message_of<FormatError>([&] { unpack_bucket(bucket, shifted); }),
                  "bucket 4, entry 0 'a'");
}

// --- manifests across processes ------------------------------------------------------------

template <class OutArchive, class InArchive>
BucketManifest round_trip(const BucketManifest& manifest) {
  std::stringstream stream;
  {
    OutArchive out(stream);
    out(manifest);
  }
  InArchive in(stream);
  BucketManifest loaded;
  in(loaded);
  return loaded;
}

void expect_same(const BucketManifest& a, const BucketManifest& b) {
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.nbytes, b.nbytes);
  ASSERT_EQ(a.entries.size(), b.entries.size());
  for (size_t i = 0; i < a.entries.size(); ++i) {
    EXPECT_EQ(a.entries[i].name, b.entries[i].name);
    EXPECT_EQ(a.entries[i].dtype, b.entries[i].dtype);
    EXPECT_EQ(a.entries[i].shape, b.entries[i].shape);
    EXPECT_EQ(a.entries[i].offset, b.entries[i].offset);
    EXPECT_EQ(a.entries[i].nbytes, b.entries[i].nbytes);
  }
}

TEST(ManifestSerialization, RoundTripsThroughBinaryArchives) {
  Mixed m = mixed_tensors();
  std::vector<BucketManifest> plan = plan_buckets(specs_of(m), 512);
  ASSERT_GT(plan.size(), 2u);
  for (const BucketManifest& bucket : plan) {
    expect_same(round_trip<cereal::BinaryOutputArchive, cereal::BinaryInputArchive>(bucket),
                bucket);
    expect_same(
        round_trip<cereal::PortableBinaryOutputArchive, cereal::PortableBinaryInputArchive>(bucket),
        bucket);
  }
  // A whole plan as one vector.
  std::stringstream stream;
  {
    cereal::BinaryOutputArchive out(stream);
    out(plan);
  }
  std::vector<BucketManifest> loaded;
  cereal::BinaryInputArchive in(stream);
  in(loaded);
  ASSERT_EQ(loaded.size(), plan.size());
  for (size_t i = 0; i < plan.size(); ++i) expect_same(loaded[i], plan[i]);
}

// A valid two-entry manifest (bucket 7: 'a' fp32 [4] at 0, 'b' bf16 [2, 3] at 256) to corrupt.
BucketManifest two_entries() {
  BucketManifest manifest;
  manifest.index = 7;
  manifest.nbytes = 512;
  manifest.entries = {{"a", at::kFloat, {4}, 0, 16}, {"b", at::kBFloat16, {2, 3}, 256, 12}};
  return manifest;
}

std::string load_error(const BucketManifest& manifest) {
  return error_message_of<FormatError>(
      [&] { round_trip<cereal::BinaryOutputArchive, cereal::BinaryInputArchive>(manifest); });
}

TEST(ManifestSerialization, RefusesInconsistentManifests) {
  EXPECT_NO_THROW(validate_manifest(two_entries()));

  BucketManifest overlap = two_entries();
  overlap.entries[0] = {"a", at::kFloat, {100}, 0, 400};
  std::string message = load_error(overlap);
  EXPECT_CONTAINS(message, "bucket 7, entry 1 'b' at bytes [256, 268) overlaps entry 0 'a'");

  BucketManifest out_of_range = two_entries();
  out_of_range.entries[1].offset = 512;
  EXPECT_CONTAINS(load_error(out_of_range), "bucket 7, entry 1 'b' spans bytes [512, 512 + 12)");
  out_of_range.entries[1].offset = -256;
  EXPECT_CONTAINS(load_error(out_of_range), "bucket 7, entry 1 'b' starts at offset -256");

  BucketManifest misaligned = two_entries();
  misaligned.entries[1].offset = 128;
  EXPECT_CONTAINS(load_error(misaligned), "entry 1 'b' starts at offset 128");

  BucketManifest wrong_size = two_entries();
  wrong_size.entries[0].nbytes = 32;
  EXPECT_CONTAINS(load_error(wrong_size),
                  "bucket 7, entry 0 'a' claims 32 bytes, but float32 [4] takes 16");
  BucketManifest negative_dim = two_entries();
  negative_dim.entries[0].shape = {-4};
  EXPECT_CONTAINS(load_error(negative_dim), "entry 0 'a' has shape [-4]");

  BucketManifest duplicate = two_entries();
  duplicate.entries[1].name = "a";
  EXPECT_CONTAINS(load_error(duplicate), "bucket 7, entry 1 'a' repeats the name");

  BucketManifest negative = two_entries();
  negative.nbytes = -1;
  EXPECT_CONTAINS(load_error(negative), "bucket 7 claims -1 bytes");

  // Zero-byte entries overlap nothing.
  BucketManifest with_empty = two_entries();
  with_empty.entries.push_back({"e", at::kFloat, {0}, 256, 0});
  EXPECT_NO_THROW(validate_manifest(with_empty));
  expect_same(round_trip<cereal::BinaryOutputArchive, cereal::BinaryInputArchive>(with_empty),
              with_empty);
}

TEST(ManifestSerialization, RefusesCorruptBytes) {
  std::stringstream stream;
  {
    cereal::BinaryOutputArchive out(stream);
    out(two_entries());
  }
  const std::string good = stream.str();
  // Binary layout: index, nbytes, entry count, then entry 0: name length (8 bytes), "a", dtype.
  const size_t dtype_at = 8 + 8 + 8 + 8 + 1;
  ASSERT_EQ(static_cast<uint8_t>(good[dtype_at]), 1) << "float32's code";
  auto load = [](const std::string& bytes) {
    std::stringstream in_stream(bytes);
    cereal::BinaryInputArchive in(in_stream);
    BucketManifest loaded;
    in(loaded);
  };
  for (uint8_t code : {uint8_t{0}, uint8_t{11}, uint8_t{0xFF}}) {
    std::string bad = good;
    bad[dtype_at] = static_cast<char>(code);
    EXPECT_CONTAINS(error_message_of<FormatError>([&] { load(bad); }),
                    "dtype code " + std::to_string(code));
  }
  std::string long_name = good;
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(&long_name[24], &huge, sizeof(huge));
  EXPECT_CONTAINS(error_message_of<FormatError>([&] { load(long_name); }), "name of 1099511627776");
  std::string deep = good;
  std::memcpy(&deep[dtype_at + 1], &huge, sizeof(huge));
  EXPECT_CONTAINS(error_message_of<FormatError>([&] { load(deep); }), "1099511627776 dimensions");
}

// --- a real model's weights ----------------------------------------------------------------

models::ModelConfig qwen3_like_config() {
  nlohmann::json j = {
      {"model_type", "qwen3"},    {"vocab_size", 300},      {"hidden_size", 64},
      {"intermediate_size", 96},  {"num_hidden_layers", 3}, {"num_attention_heads", 4},
      {"num_key_value_heads", 2}, {"head_dim", 16},         {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"}};
  return models::ModelConfig::from_json(j, "bucket_test config.json");
}

TEST(PlanBuckets, QwenWeightsAtSeveralBucketSizesKeepEveryTensorOnceInOrder) {
  models::TransformerModel model(qwen3_like_config(), at::kBFloat16);
  model->init_weights(11);
  // Hugging Face order, as the trainer walks it. Norms travel in fp32 to mix dtypes.
  std::vector<TensorSpec> specs;
  std::map<std::string, at::Tensor> weights;
  for (const auto& item : model->named_parameters()) {
    at::Tensor value = item.value().detach();
    if (item.key().find("norm") != std::string::npos) value = value.to(at::kFloat);
    specs.push_back({item.key(), value.scalar_type(), value.sizes().vec()});
    weights[item.key()] = value;
  }
  ASSERT_EQ(specs.front().name, "model.embed_tokens.weight");
  ASSERT_EQ(specs.back().name, "lm_head.weight");
  int64_t total = 0;
  for (const TensorSpec& s : specs) total += round_up_256(s.nbytes());

  for (int64_t max_bytes : {int64_t{1}, int64_t{256}, int64_t{4096}, int64_t{12000}, int64_t{65536},
                            total, kDefaultUpdateWeightBufferSize}) {
    SCOPED_TRACE("max_bytes " + std::to_string(max_bytes));
    std::vector<BucketManifest> plan = plan_buckets(specs, max_bytes);
    size_t next = 0;  // position in `specs` where the current bucket's tensors start
    for (const BucketManifest& bucket : plan) {
      validate_manifest(bucket);
      ASSERT_FALSE(bucket.entries.empty());
      // The bucket holds the next run of specs, whatever their dtype ...
      std::set<std::string> members;
      for (const BucketEntry& entry : bucket.entries) members.insert(entry.name);
      ASSERT_EQ(members.size(), bucket.entries.size());
      int64_t used = 0;
      std::vector<std::string> expected_layout;
      for (at::ScalarType dtype : bucket_dtype_order()) {
        for (size_t i = next; i < next + members.size(); ++i) {
          ASSERT_LT(i, specs.size());
          ASSERT_TRUE(members.count(specs[i].name)) << specs[i].name << " out of HF order";
          if (specs[i].dtype == dtype) expected_layout.push_back(specs[i].name);
        }
      }
      for (size_t i = next; i < next + members.size(); ++i) used += round_up_256(specs[i].nbytes());
      // ... laid out by dtype, HF order kept within each dtype ...
      std::vector<std::string> layout;
      for (const BucketEntry& entry : bucket.entries) layout.push_back(entry.name);
      EXPECT_EQ(layout, expected_layout) << "bucket " << bucket.index;
      EXPECT_EQ(bucket.nbytes, used);
      // ... within the limit unless alone, and as full as the limit allows (greedy).
      if (bucket.entries.size() > 1) {
        EXPECT_LE(bucket.nbytes, max_bytes);
      }
      next += members.size();
      if (next < specs.size()) {
        EXPECT_GT(used + round_up_256(specs[next].nbytes()), max_bytes)
            << specs[next].name << " would have fit bucket " << bucket.index;
      }

      // The packed bucket unpacks to the model's weights.
      std::vector<at::Tensor> inputs;
      for (const BucketEntry& entry : bucket.entries) inputs.push_back(weights.at(entry.name));
      at::Tensor buffer = pack_bucket(bucket, inputs);
      for (const auto& [name, tensor] : unpack_bucket(bucket, buffer)) {
        EXPECT_TRUE(at::equal(tensor, weights.at(name))) << name;
      }
    }
    EXPECT_EQ(next, specs.size()) << "every tensor exactly once";
    if (max_bytes >= total) {
      EXPECT_EQ(plan.size(), 1u);
    }
    if (max_bytes == 1) {
      EXPECT_EQ(plan.size(), specs.size());
    }
  }
}

// --- configuration -------------------------------------------------------------------------

}  // namespace bucket_test
}  // namespace ooze::weight_sync
