#include "core/tensor_serialization.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cereal/archives/binary.hpp>
#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace ooze {
namespace tensor_serialization_test {

template <class OutputArchive, class InputArchive, class T>
T round_trip(const T& value) {
  std::stringstream stream;
  {
    OutputArchive out(stream);
    out(value);
  }
  T loaded{};
  InputArchive in(stream);
  in(loaded);
  return loaded;
}

at::Tensor binary_round_trip(const at::Tensor& tensor) {
  return round_trip<cereal::BinaryOutputArchive, cereal::BinaryInputArchive>(tensor);
}

at::Tensor portable_round_trip(const at::Tensor& tensor) {
  return round_trip<cereal::PortableBinaryOutputArchive, cereal::PortableBinaryInputArchive>(
      tensor);
}

// Same dtype, same shape, same bytes; a fresh contiguous CPU tensor that owns its memory.
void expect_identical(const at::Tensor& loaded, const at::Tensor& original) {
  ASSERT_TRUE(loaded.defined());
  EXPECT_EQ(loaded.scalar_type(), original.scalar_type());
  EXPECT_EQ(loaded.sizes(), original.sizes());
  EXPECT_TRUE(loaded.is_contiguous());
  EXPECT_TRUE(loaded.device().is_cpu());
  if (original.numel() > 0) {
    EXPECT_NE(loaded.data_ptr(), original.data_ptr());
  }
  // Byte comparison: exact for every dtype, NaN payloads included.
  at::Tensor expected = original.contiguous();
  ASSERT_EQ(loaded.numel() * loaded.element_size(), expected.numel() * expected.element_size());
  EXPECT_EQ(std::memcmp(loaded.data_ptr(), expected.data_ptr(),
                        expected.numel() * expected.element_size()),
            0);
  // And element-wise, through LibTorch.
  EXPECT_TRUE(at::equal(loaded, original)) << at::toString(original.scalar_type());
}

// Values that use every byte of the element, with negatives and fractions where the dtype has
// them.
at::Tensor sample(at::ScalarType dtype, at::IntArrayRef shape) {
  int64_t numel = 1;
  for (int64_t size : shape) numel *= size;
  at::Tensor values = at::arange(numel, at::kDouble);
  if (values.numel() > 0) values = (values - values.numel() / 2) * 1.25 + 0.5;
  if (dtype == at::kBool) return (values.remainder(3) > 1).reshape(shape);
  if (dtype == at::kByte) return values.abs().remainder(256).to(dtype).reshape(shape);
  if (at::isIntegralType(dtype, /*includeBool=*/false)) {
    return (values * 1000003).to(dtype).reshape(shape);
  }
  return values.to(dtype).reshape(shape);
}

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf,
                                             at::kChar,  at::kShort,  at::kInt,      at::kLong,
                                             at::kByte,  at::kBool};

TEST(TensorSerializationTest, EveryDtypeRoundTripsThroughBinaryArchives) {
  for (at::ScalarType dtype : kDtypes) {
    SCOPED_TRACE(at::toString(dtype));
    at::Tensor original = sample(dtype, {3, 5});
    expect_identical(binary_round_trip(original), original);
    expect_identical(portable_round_trip(original), original);
  }
}

TEST(TensorSerializationTest, LargeIntegersKeepEveryByte) {
  at::Tensor original =
      at::tensor(std::vector<int64_t>{INT64_MIN, -1, 0, 1, INT64_MAX, 0x0102030405060708});
  expect_identical(binary_round_trip(original), original);
  expect_identical(portable_round_trip(original), original);
}

TEST(TensorSerializationTest, NonContiguousViewsAreWrittenContiguous) {
  at::Tensor base = sample(at::kFloat, {4, 6});
  for (const at::Tensor& view :
       {base.t(), base.slice(1, 0, 6, 2), base.select(1, 3), base.unsqueeze(0).expand({2, 4, 6})}) {
    ASSERT_FALSE(view.is_contiguous());
    expect_identical(binary_round_trip(view), view);
    expect_identical(portable_round_trip(view), view);
  }
  // A contiguous slice at an offset into its storage.
  at::Tensor offset = base.slice(0, 2, 4);
  ASSERT_TRUE(offset.is_contiguous());
  expect_identical(binary_round_trip(offset), offset);
}

TEST(TensorSerializationTest, ZeroDimAndEmptyTensors) {
  for (at::ScalarType dtype : kDtypes) {
    SCOPED_TRACE(at::toString(dtype));
    at::Tensor scalar = sample(dtype, {});
    ASSERT_EQ(scalar.dim(), 0);
    expect_identical(binary_round_trip(scalar), scalar);
    for (auto shape : {std::vector<int64_t>{0}, std::vector<int64_t>{3, 0, 2}}) {
      at::Tensor empty = at::empty(shape, at::TensorOptions().dtype(dtype));
      expect_identical(binary_round_trip(empty), empty);
      expect_identical(portable_round_trip(empty), empty);
    }
  }
}

TEST(TensorSerializationTest, UndefinedTensorRoundTrips) {
  EXPECT_FALSE(binary_round_trip(at::Tensor()).defined());
  EXPECT_FALSE(portable_round_trip(at::Tensor()).defined());
}

TEST(TensorSerializationTest, TensorsInsideContainers) {
  std::map<std::string, at::Tensor> named = {{"weight", sample(at::kBFloat16, {2, 3})},
                                             {"bias", sample(at::kFloat, {3})},
                                             {"none", at::Tensor()}};
  auto loaded = round_trip<cereal::BinaryOutputArchive, cereal::BinaryInputArchive>(named);
  ASSERT_EQ(loaded.size(), 3u);
  expect_identical(loaded["weight"], named["weight"]);
  expect_identical(loaded["bias"], named["bias"]);
  EXPECT_FALSE(loaded["none"].defined());

  std::vector<at::Tensor> list = {sample(at::kLong, {4}), sample(at::kBool, {2, 2})};
  auto loaded_list = round_trip<cereal::BinaryOutputArchive, cereal::BinaryInputArchive>(list);
  ASSERT_EQ(loaded_list.size(), 2u);
  expect_identical(loaded_list[0], list[0]);
  expect_identical(loaded_list[1], list[1]);
}

TEST(TensorSerializationTest, LoadedTensorOwnsItsMemory) {
  std::string bytes;
  {
    std::stringstream stream;
    cereal::BinaryOutputArchive out(stream);
    out(sample(at::kFloat, {8}));
    bytes = stream.str();
  }
  at::Tensor loaded;
  {
    std::stringstream stream(bytes);
    cereal::BinaryInputArchive in(stream);
    in(loaded);
  }
  bytes.assign(bytes.size(), '\xff');  // the source buffer is gone
  EXPECT_TRUE(at::equal(loaded, sample(at::kFloat, {8})));
}

// Hand-written archives, to test what load does with bytes no save produced.
std::string frame(uint8_t code, const std::vector<int64_t>& shape, uint64_t nbytes,
                  size_t payload) {
  std::stringstream stream;
  {
    cereal::BinaryOutputArchive out(stream);
    out(code, static_cast<uint32_t>(shape.size()));
    for (int64_t size : shape) out(size);
    out(nbytes);
    std::string data(payload, '\0');
    out(cereal::binary_data(data.data(), data.size()));
  }
  return stream.str();
}

std::string load_error(const std::string& bytes) {
  std::stringstream stream(bytes);
  cereal::BinaryInputArchive in(stream);
  at::Tensor tensor;
  try {
    in(tensor);
  } catch (const FormatError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a FormatError";
  return "";
}

TEST(TensorSerializationTest, ValidHandWrittenFrameLoads) {
  std::stringstream stream(frame(1, {2, 3}, 24, 24));
  cereal::BinaryInputArchive in(stream);
  at::Tensor tensor;
  in(tensor);
  EXPECT_EQ(tensor.scalar_type(), at::kFloat);
  EXPECT_EQ(tensor.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(at::equal(tensor, at::zeros({2, 3})));
}

TEST(TensorSerializationTest, UnknownDtypeCodeIsRejected) {
  std::string message = load_error(frame(200, {2}, 8, 8));
  EXPECT_NE(message.find("unknown dtype code 200"), std::string::npos) << message;
}

TEST(TensorSerializationTest, ByteCountMismatchIsRejected) {
  std::string message = load_error(frame(1, {2, 3}, 20, 20));
  EXPECT_NE(message.find("shape [2, 3]"), std::string::npos) << message;
  EXPECT_NE(message.find("(24 bytes) but carries 20 bytes"), std::string::npos) << message;
}

TEST(TensorSerializationTest, CorruptShapesAreRejected) {
  EXPECT_NE(load_error(frame(1, {-2, 3}, 24, 24)).find("negative size"), std::string::npos);
  EXPECT_NE(load_error(frame(8, {1LL << 40, 1LL << 40}, 8, 8)).find("too large"),
            std::string::npos);
  std::stringstream stream;
  {
    cereal::BinaryOutputArchive out(stream);
    out(uint8_t{1}, uint32_t{1000000000});
  }
  EXPECT_NE(load_error(stream.str()).find("1000000000 dimensions"), std::string::npos);
}

TEST(TensorSerializationTest, TruncatedDataThrowsInsteadOfCrashing) {
  std::string bytes = frame(1, {4}, 16, 16);
  bytes.resize(bytes.size() - 5);
  std::stringstream stream(bytes);
  cereal::BinaryInputArchive in(stream);
  at::Tensor tensor;
  EXPECT_THROW(in(tensor), cereal::Exception);
}

TEST(TensorSerializationTest, UnsupportedTensorsAreRejectedOnSave) {
  std::stringstream stream;
  cereal::BinaryOutputArchive out(stream);
  try {
    out(at::zeros({2}, at::kComplexFloat));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dtype ComplexFloat"), std::string::npos) << e.what();
  }
  EXPECT_THROW(out(at::zeros({2, 2}).to_sparse()), Error);
}

TEST(TensorSerializationTest, CudaTensorsAreRejectedOnSave) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA";
  std::stringstream stream;
  cereal::BinaryOutputArchive out(stream);
  try {
    out(at::zeros({2}, at::TensorOptions().device(at::kCUDA)));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(".cpu()"), std::string::npos) << e.what();
  }
}

}  // namespace tensor_serialization_test
}  // namespace ooze
