#include "core/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/support/process.h"

namespace safetensors_test {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ooze::FormatError;
using ooze::NamedTensors;
using ooze::SafetensorsFile;
using ooze::ShardedSafetensors;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string le_u64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

// A safetensors file assembled by hand: length prefix + header text + data bytes.
std::string assemble(const std::string& header, const std::string& data) {
  return le_u64(header.size()) + header + data;
}

template <typename T>
std::string raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// Expects `body` to throw FormatError whose message contains every one of `needles`.
void expect_format_error(const std::function<void()>& body,
                         const std::vector<std::string>& needles) {
  try {
    body();
    ADD_FAILURE() << "expected FormatError mentioning '" << needles.front() << "'";
  } catch (const FormatError& e) {
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "message lacks '" << needle << "': " << e.what();
    }
  }
}

std::vector<std::string> temporary_files(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) found.push_back(name);
  }
  return found;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = ooze::testing::make_temp_dir("safetensors"); }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  std::string dir_;
};

// One tensor of each dtype, with values that exercise the whole range of the type.
NamedTensors tensors_of_every_dtype() {
  at::manual_seed(7);
  at::Tensor normal = at::randn({3, 5}, at::kDouble) * 1000;
  return {
      {"f64", normal.clone()},
      {"f32", normal.to(at::kFloat)},
      {"f16", normal.to(at::kHalf)},
      {"bf16", normal.to(at::kBFloat16)},
      {"i64", at::randint(-(int64_t{1} << 62), int64_t{1} << 62, {3, 5}, at::kLong)},
      {"i32", at::randint(-(int64_t{1} << 30), int64_t{1} << 30, {3, 5}, at::kInt)},
      {"i16", at::randint(-32768, 32767, {3, 5}, at::kShort)},
      {"i8", at::randint(-128, 127, {3, 5}, at::kChar)},
      {"u8", at::randint(0, 255, {3, 5}, at::kByte)},
      {"bool", at::rand({3, 5}) > 0.5},
  };
}

TEST_F(SafetensorsTest, RoundTripsEveryDtype) {
  const NamedTensors tensors = tensors_of_every_dtype();
  ooze::save_safetensors(path("all.safetensors"), tensors, {{"step", "12"}, {"format", "pt"}});

  SafetensorsFile file = SafetensorsFile::open(path("all.safetensors"));
  EXPECT_EQ(file.names().size(), tensors.size());
  EXPECT_EQ(file.metadata(), (ooze::SafetensorsMetadata{{"step", "12"}, {"format", "pt"}}));
  for (const auto& [name, expected] : tensors) {
    at::Tensor loaded = file.tensor(name);
    EXPECT_EQ(loaded.scalar_type(), expected.scalar_type()) << name;
    EXPECT_EQ(loaded.sizes(), expected.sizes()) << name;
    EXPECT_TRUE(at::equal(loaded, expected)) << name;
    EXPECT_EQ(ooze::to_scalar_type(file.info(name).dtype), expected.scalar_type()) << name;
  }
}

TEST_F(SafetensorsTest, RoundTripsScalarsAndEmptyTensors) {
  const NamedTensors tensors = {
      {"scalar_f32", at::scalar_tensor(3.5, at::kFloat)},
      {"scalar_bool", at::scalar_tensor(true, at::kBool)},
      {"scalar_i64", at::scalar_tensor(-9, at::kLong)},
      {"empty_1d", at::empty({0}, at::kFloat)},
      {"empty_3d", at::empty({3, 0, 2}, at::kBFloat16)},
  };
  ooze::save_safetensors(path("edge.safetensors"), tensors);
  SafetensorsFile file = SafetensorsFile::open(path("edge.safetensors"));
  for (const auto& [name, expected] : tensors) {
    at::Tensor loaded = file.tensor(name);
    EXPECT_EQ(loaded.dim(), expected.dim()) << name;
    EXPECT_EQ(loaded.sizes(), expected.sizes()) << name;
    EXPECT_EQ(loaded.scalar_type(), expected.scalar_type()) << name;
    EXPECT_TRUE(at::equal(loaded, expected)) << name;
  }
  EXPECT_EQ(file.info("empty_3d").nbytes(), 0u);
  EXPECT_EQ(file.tensor("scalar_f32").item<float>(), 3.5f);
}

TEST_F(SafetensorsTest, RoundTripsNonContiguousInputs) {
  at::Tensor base = at::arange(24, at::kFloat).reshape({4, 6});
  const NamedTensors tensors = {
      {"transposed", base.t()},
      {"strided", base.index({at::indexing::Slice(), at::indexing::Slice(0, 6, 2)})},
      {"expanded", at::arange(3, at::kInt).unsqueeze(0).expand({4, 3})},
      {"negated_view", at::_neg_view(base)},
  };
  for (const auto& entry : tensors) {
    if (entry.first != "negated_view") {
      ASSERT_FALSE(entry.second.is_contiguous()) << entry.first;
    }
  }
  ooze::save_safetensors(path("views.safetensors"), tensors);
  SafetensorsFile file = SafetensorsFile::open(path("views.safetensors"));
  for (const auto& [name, expected] : tensors) {
    EXPECT_TRUE(at::equal(file.tensor(name), expected)) << name;
  }
  EXPECT_EQ(file.tensor("negated_view").index({0, 1}).item<float>(), -1.0f);
}

TEST_F(SafetensorsTest, ReadsHandAssembledGoldenFile) {
  // Written the way the reference library lays files out, byte by byte.
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("step":{"dtype":"I64","shape":[],"data_offsets":[24,32]},)"
                             R"("half":{"dtype":"F16","shape":[2],"data_offsets":[32,36]},)"
                             R"("brain":{"dtype":"BF16","shape":[2],"data_offsets":[36,40]},)"
                             R"("mask":{"dtype":"BOOL","shape":[3],"data_offsets":[40,43]},)"
                             R"("none":{"dtype":"F32","shape":[0,4],"data_offsets":[43,43]}}   )";
  const std::string data = raw<float>({1.5f, -2.0f, 0.25f, 1e-3f, 3e8f, -0.0f}) +
                           raw<int64_t>({-1234567890123}) +
                           raw<uint16_t>({0x3C00, 0xC000}) +  // f16: 1.0, -2.0
                           raw<uint16_t>({0x3F80, 0x4049}) +  // bf16: 1.0, 3.140625
                           std::string("\x01\x00\x01", 3);
  write_bytes(path("golden.safetensors"), assemble(header, data));

  SafetensorsFile file = SafetensorsFile::open(path("golden.safetensors"));
  EXPECT_EQ(file.names(),
            (std::vector<std::string>{"brain", "half", "mask", "none", "step", "weight"}));
  EXPECT_EQ(file.metadata().at("format"), "pt");

  at::Tensor weight = file.tensor("weight");
  EXPECT_EQ(weight.sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(at::equal(weight, at::tensor({1.5f, -2.0f, 0.25f, 1e-3f, 3e8f, -0.0f}).view({2, 3})));
  at::Tensor step = file.tensor("step");
  EXPECT_EQ(step.dim(), 0);
  EXPECT_EQ(step.item<int64_t>(), -1234567890123);
  EXPECT_TRUE(at::equal(file.tensor("half").to(at::kFloat), at::tensor({1.0f, -2.0f})));
  EXPECT_TRUE(at::equal(file.tensor("brain").to(at::kFloat), at::tensor({1.0f, 3.140625f})));
  at::Tensor mask = file.tensor("mask");
  EXPECT_EQ(mask.scalar_type(), at::kBool);
  EXPECT_TRUE(at::equal(mask, at::tensor({1, 0, 1}).to(at::kBool)));
  EXPECT_EQ(file.tensor("none").sizes().vec(), (std::vector<int64_t>{0, 4}));
  const ooze::SafetensorsTensorInfo& info = file.info("step");
  EXPECT_EQ(info.dtype, ooze::SafetensorsDtype::I64);
  EXPECT_EQ(info.data_begin, 24u);
  EXPECT_EQ(info.data_end, 32u);
}

TEST_F(SafetensorsTest, WriterOutputMatchesTheSpecByteForByte) {
  const NamedTensors tensors = tensors_of_every_dtype();
  ooze::save_safetensors(path("spec.safetensors"), tensors, {{"note", "hi"}});

  // Parse the file independently of the reader.
  const std::string bytes = read_bytes(path("spec.safetensors"));
  ASSERT_GE(bytes.size(), 8u);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<uint8_t>(bytes[i]);
  ASSERT_LE(8 + header_size, bytes.size());
  EXPECT_EQ((8 + header_size) % 8, 0u) << "header is padded to a multiple of 8";
  const std::string header_text = bytes.substr(8, header_size);
  const size_t json_end = header_text.find_last_of('}');
  EXPECT_EQ(header_text.find_first_not_of(' ', json_end + 1), std::string::npos)
      << "padding is spaces";
  const json header = json::parse(header_text);
  const std::string data = bytes.substr(8 + header_size);

  EXPECT_EQ(header["__metadata__"], (json{{"note", "hi"}}));
  const std::map<at::ScalarType, std::string> codes = {
      {at::kDouble, "F64"}, {at::kFloat, "F32"}, {at::kHalf, "F16"},  {at::kBFloat16, "BF16"},
      {at::kLong, "I64"},   {at::kInt, "I32"},   {at::kShort, "I16"}, {at::kChar, "I8"},
      {at::kByte, "U8"},    {at::kBool, "BOOL"}};
  uint64_t covered = 0;
  for (const auto& [name, tensor] : tensors) {
    ASSERT_TRUE(header.contains(name)) << name;
    const json& entry = header[name];
    EXPECT_EQ(entry.size(), 3u) << name;
    EXPECT_EQ(entry["dtype"], codes.at(tensor.scalar_type())) << name;
    EXPECT_EQ(entry["shape"].get<std::vector<int64_t>>(), tensor.sizes().vec()) << name;
    const uint64_t begin = entry["data_offsets"][0], end = entry["data_offsets"][1];
    const uint64_t nbytes = tensor.numel() * tensor.element_size();
    ASSERT_EQ(end - begin, nbytes) << name;
    ASSERT_LE(end, data.size()) << name;
    EXPECT_EQ((8 + header_size + begin) % tensor.element_size(), 0u) << name << " is aligned";
    EXPECT_EQ(std::memcmp(data.data() + begin, tensor.contiguous().data_ptr(), nbytes), 0) << name;
    covered += nbytes;
  }
  EXPECT_EQ(covered, data.size()) << "the data section holds the tensors and nothing else";
}

TEST_F(SafetensorsTest, TensorsViewTheMappingAndOutliveTheFileObject) {
  at::Tensor expected = at::arange(1000, at::kFloat);
  ooze::save_safetensors(path("big.safetensors"), {{"x", expected}});
  at::Tensor first, second;
  {
    SafetensorsFile file = SafetensorsFile::open(path("big.safetensors"));
    first = file.tensor("x");
    second = file.tensor("x");
  }
  EXPECT_EQ(first.data_ptr(), second.data_ptr()) << "zero-copy views of the same bytes";
  EXPECT_TRUE(at::equal(first, expected));
  EXPECT_TRUE(at::equal(first * 2, expected * 2));
}

TEST_F(SafetensorsTest, EmptyCheckpointRoundTrips) {
  ooze::save_safetensors(path("empty.safetensors"), {});
  SafetensorsFile file = SafetensorsFile::open(path("empty.safetensors"));
  EXPECT_TRUE(file.names().empty());
  EXPECT_TRUE(file.metadata().empty());
}

TEST_F(SafetensorsTest, EmptyTensorWithLargeDimsLoads) {
  const std::string header =
      R"({"e":{"dtype":"F32","shape":[0,1099511627776],"data_offsets":[0,0]}})";
  write_bytes(path("wide_empty.safetensors"), assemble(header, ""));
  at::Tensor empty = SafetensorsFile::open(path("wide_empty.safetensors")).tensor("e");
  EXPECT_EQ(empty.sizes().vec(), (std::vector<int64_t>{0, int64_t{1} << 40}));
  EXPECT_EQ(empty.numel(), 0);
}

TEST_F(SafetensorsTest, UnknownTensorNameIsAnErrorNamingTheFile) {
  ooze::save_safetensors(path("a.safetensors"), {{"x", at::ones({2})}});
  SafetensorsFile file = SafetensorsFile::open(path("a.safetensors"));
  EXPECT_FALSE(file.contains("y"));
  try {
    file.tensor("y");
    ADD_FAILURE() << "expected an error";
  } catch (const ooze::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'y'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path("a.safetensors")), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, MissingFileIsAnIoError) {
  EXPECT_THROW(SafetensorsFile::open(path("absent.safetensors")), ooze::IoError);
}

TEST_F(SafetensorsTest, DtypeWithoutLibTorchEquivalentFailsOnlyForThatTensor) {
  const std::string header = R"({"ok":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("wide":{"dtype":"U16","shape":[2],"data_offsets":[4,8]}})";
  write_bytes(path("u16.safetensors"),
              assemble(header, raw<float>({2.0f}) + raw<uint16_t>({1, 2})));
  SafetensorsFile file = SafetensorsFile::open(path("u16.safetensors"));
  EXPECT_EQ(file.tensor("ok").item<float>(), 2.0f);
  EXPECT_EQ(file.info("wide").dtype, ooze::SafetensorsDtype::U16);
  expect_format_error([&] { file.tensor("wide"); }, {"'wide'", "U16", path("u16.safetensors")});
}

// ---------------------------------------------------------------------------------------------
// Malformed files: each must raise FormatError naming the file and, where there is one, the
// offending tensor.

struct MalformedCase {
  std::string label;
  std::string bytes;
  std::vector<std::string> needles;  // besides the path
};

std::string tensor_json(const std::string& name, const std::string& dtype, const std::string& shape,
                        const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":" + dtype + ",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

std::vector<MalformedCase> malformed_cases() {
  const std::string four_floats(16, '\0');
  auto file = [&](const std::string& header, const std::string& data = std::string(16, '\0')) {
    return assemble(header, data);
  };
  auto one = [&](const std::string& entry) { return file("{" + entry + "}"); };
  return {
      {"empty file", "", {"0 bytes", "shorter than the 8-byte"}},
      {"five bytes", "abcde", {"5 bytes", "shorter than the 8-byte"}},
      {"header length past end", le_u64(1000) + "{}", {"header length 1000", "past the end"}},
      {"header length absurd", le_u64(uint64_t{1} << 62) + "{}", {"exceeds"}},
      {"header length max", le_u64(~uint64_t{0}) + "{}", {"exceeds"}},
      {"bad json", file(R"({"w":{"dtype":"F32",)"), {"not valid JSON"}},
      {"invalid utf8", file("{\"w\xff\":1}"), {"not valid JSON"}},
      {"header is array", file("[1,2]"), {"must be a JSON object", "array"}},
      {"trailing garbage", file("{} x"), {"not valid JSON"}},
      {"deep nesting", file("{\"w\":{\"shape\":[[[[[[1]]]]]]}}"), {"'w'", "nested deeper"}},
      {"entry not object", one(R"("w":[1,2])"), {"'w'", "must be an object"}},
      {"missing dtype",
       one(R"("w":{"shape":[4],"data_offsets":[0,16]})"),
       {"'w'", "missing field 'dtype'"}},
      {"missing shape",
       one(R"("w":{"dtype":"F32","data_offsets":[0,16]})"),
       {"'w'", "missing field 'shape'"}},
      {"missing offsets",
       one(R"("w":{"dtype":"F32","shape":[4]})"),
       {"'w'", "missing field 'data_offsets'"}},
      {"extra field",
       one(R"("w":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"x":1})"),
       {"'w'", "unexpected field 'x'"}},
      {"dtype not string",
       one(tensor_json("w", "4", "[4]", "[0,16]")),
       {"'w'", "dtype must be a string"}},
      {"unknown dtype",
       one(tensor_json("w", "\"F31\"", "[4]", "[0,16]")),
       {"'w'", "unknown dtype 'F31'"}},
      {"lowercase dtype",
       one(tensor_json("w", "\"f32\"", "[4]", "[0,16]")),
       {"'w'", "unknown dtype"}},
      {"shape not array",
       one(tensor_json("w", "\"F32\"", "4", "[0,16]")),
       {"'w'", "shape must be an array"}},
      {"negative dim",
       one(tensor_json("w", "\"F32\"", "[-4]", "[0,16]")),
       {"'w'", "shape[0] is negative"}},
      {"fractional dim",
       one(tensor_json("w", "\"F32\"", "[2,2.5]", "[0,16]")),
       {"'w'", "shape[1] is not an integer"}},
      {"string dim",
       one(tensor_json("w", "\"F32\"", "[\"4\"]", "[0,16]")),
       {"'w'", "shape[0] must be a non-negative integer"}},
      {"dim beyond u64",
       one(tensor_json("w", "\"F32\"", "[1e30]", "[0,16]")),
       {"'w'", "not an integer"}},
      {"dim beyond i64",
       one(tensor_json("w", "\"U8\"", "[9223372036854775808]", "[0,16]")),
       {"'w'", "too large"}},
      // 2^32 * 2^32 * 4 wraps to 0 in 64 bits: must not pass as an empty tensor.
      {"numel overflow",
       file("{" + tensor_json("w", "\"F32\"", "[4294967296,4294967296]", "[0,0]") + "}", ""),
       {"'w'", "too large"}},
      {"zero dim hides overflow",
       file(
           "{" +
               tensor_json("w", "\"F32\"", "[0,4611686018427387904,4611686018427387904]", "[0,0]") +
               "}",
           ""),
       {"'w'", "too large"}},
      {"numel mismatch",
       one(tensor_json("w", "\"F32\"", "[3]", "[0,16]")),
       {"'w'", "needs 12 bytes", "span 16"}},
      {"dtype size mismatch",
       one(tensor_json("w", "\"F64\"", "[4]", "[0,16]")),
       {"'w'", "needs 32 bytes"}},
      {"offsets not array",
       one(tensor_json("w", "\"F32\"", "[4]", "16")),
       {"'w'", "data_offsets must be an array"}},
      {"offsets too short",
       one(tensor_json("w", "\"F32\"", "[4]", "[16]")),
       {"'w'", "array of 1 elements"}},
      {"offsets negative",
       one(tensor_json("w", "\"F32\"", "[4]", "[-16,0]")),
       {"'w'", "begin is negative"}},
      {"offsets not integer",
       one(tensor_json("w", "\"F32\"", "[4]", "[0,\"16\"]")),
       {"'w'", "data_offsets end"}},
      {"begin after end",
       one(tensor_json("w", "\"F32\"", "[4]", "[16,0]")),
       {"'w'", "begin > end"}},
      {"end past data",
       one(tensor_json("w", "\"F32\"", "[8]", "[0,32]")),
       {"'w'", "past the data section"}},
      {"overlap",
       file("{" + tensor_json("a", "\"F32\"", "[3]", "[0,12]") + "," +
            tensor_json("b", "\"F32\"", "[2]", "[8,16]") + "}"),
       {"'b'", "overlap tensor 'a'"}},
      {"same range twice",
       file("{" + tensor_json("a", "\"F32\"", "[4]", "[0,16]") + "," +
            tensor_json("b", "\"F32\"", "[4]", "[0,16]") + "}"),
       {"'b'", "overlap tensor 'a'"}},
      {"hole",
       file("{" + tensor_json("a", "\"F32\"", "[1]", "[0,4]") + "," +
            tensor_json("b", "\"F32\"", "[2]", "[8,16]") + "}"),
       {"'b'", "no holes"}},
      {"trailing bytes",
       one(tensor_json("w", "\"F32\"", "[2]", "[0,8]")),
       {"16 bytes", "cover only 8"}},
      {"duplicate name",
       file("{" + tensor_json("w", "\"F32\"", "[4]", "[0,16]") + "," +
            tensor_json("w", "\"F32\"", "[4]", "[0,16]") + "}"),
       {"'w'", "appears twice"}},
      {"metadata not object",
       file(R"({"__metadata__":["a"]})", ""),
       {"__metadata__ must be an object"}},
      {"metadata value not string",
       file(R"({"__metadata__":{"step":12}})", ""),
       {"'step'", "must be strings"}},
  };
}

TEST_F(SafetensorsTest, MalformedFilesRaiseFormatErrorNamingPathAndTensor) {
  for (const MalformedCase& malformed : malformed_cases()) {
    SCOPED_TRACE(malformed.label);
    const std::string file = path("bad.safetensors");
    write_bytes(file, malformed.bytes);
    std::vector<std::string> needles = malformed.needles;
    needles.push_back(file);
    expect_format_error([&] { SafetensorsFile::open(file); }, needles);
    // The torch-free parser gives the same verdict on the bytes in memory.
    expect_format_error(
        [&] {
          ooze::parse_safetensors_header(reinterpret_cast<const uint8_t*>(malformed.bytes.data()),
                                         malformed.bytes.size(), "in-memory");
        },
        {"in-memory"});
  }
}

TEST_F(SafetensorsTest, TruncatingAValidFileAnywhereIsAFormatError) {
  ooze::save_safetensors(path("whole.safetensors"), tensors_of_every_dtype());
  const std::string bytes = read_bytes(path("whole.safetensors"));
  for (size_t size = 0; size < bytes.size(); ++size) {
    EXPECT_THROW(
        ooze::parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), size, "cut"),
        FormatError)
        << "truncated to " << size << " bytes";
  }
}

// ---------------------------------------------------------------------------------------------
// Atomic saving

TEST_F(SafetensorsTest, SaveLeavesNoTemporaryFiles) {
  ooze::save_safetensors(path("a.safetensors"), {{"x", at::ones({4})}});
  ooze::save_safetensors(path("a.safetensors"), {{"x", at::zeros({4})}});  // overwrite
  EXPECT_TRUE(temporary_files(dir_).empty());
  EXPECT_TRUE(at::equal(SafetensorsFile::open(path("a.safetensors")).tensor("x"), at::zeros({4})));
}

TEST_F(SafetensorsTest, FailedSaveLeavesExistingFileUntouched) {
  const std::string file = path("keep.safetensors");
  ooze::save_safetensors(file, {{"x", at::arange(5, at::kFloat)}});
  const std::string before = read_bytes(file);

  const std::vector<std::pair<std::string, NamedTensors>> rejected = {
      {"duplicate names", {{"x", at::ones({2})}, {"x", at::ones({2})}}},
      {"complex dtype", {{"y", at::ones({2}, at::kComplexFloat)}}},
      {"non-CPU tensor", {{"z", at::empty({2}, at::TensorOptions().device(at::kMeta))}}},
      {"sparse tensor", {{"s", at::eye(3).to_sparse()}}},
      {"undefined tensor", {{"u", at::Tensor()}}},
      {"reserved name", {{"__metadata__", at::ones({1})}}},
  };
  for (const auto& [label, tensors] : rejected) {
    SCOPED_TRACE(label);
    EXPECT_THROW(ooze::save_safetensors(file, tensors), ooze::Error);
    EXPECT_EQ(read_bytes(file), before);
    EXPECT_TRUE(temporary_files(dir_).empty());
  }
}

TEST_F(SafetensorsTest, NonCpuTensorErrorSaysWhatToDo) {
  try {
    ooze::save_safetensors(path("x.safetensors"),
                           {{"w", at::empty({2}, at::TensorOptions().device(at::kMeta))}});
    ADD_FAILURE() << "expected an error";
  } catch (const ooze::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CPU"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path("x.safetensors")));
}

TEST_F(SafetensorsTest, SaveIntoMissingDirectoryIsAnIoError) {
  EXPECT_THROW(ooze::save_safetensors(path("no/such/dir/x.safetensors"), {{"x", at::ones({1})}}),
               ooze::IoError);
}

// ---------------------------------------------------------------------------------------------
// Sharded checkpoints

// Five 64-byte tensors, in a deliberately unsorted order.
NamedTensors five_tensors() {
  NamedTensors tensors;
  for (const char* name : {"layers.1.w", "layers.0.w", "embed", "norm", "head"}) {
    tensors.emplace_back(name, at::randn({16}));
  }
  return tensors;
}

TEST_F(SafetensorsTest, ShardedSaveWritesHuggingFaceLayout) {
  const NamedTensors tensors = five_tensors();
  const std::string checkpoint = path("ckpt");
  ooze::save_sharded_safetensors(checkpoint, tensors, /*max_shard_bytes=*/150, {{"step", "3"}});

  // 64 + 64 fits in 150, a third does not: [2, 2, 1].
  const std::vector<std::string> shard_files = {"model-00001-of-00003.safetensors",
                                                "model-00002-of-00003.safetensors",
                                                "model-00003-of-00003.safetensors"};
  std::vector<std::string> listed;
  for (const auto& entry : fs::directory_iterator(checkpoint)) {
    listed.push_back(entry.path().filename().string());
  }
  std::sort(listed.begin(), listed.end());
  std::vector<std::string> expected_listing = shard_files;
  expected_listing.push_back("model.safetensors.index.json");
  EXPECT_EQ(listed, expected_listing);

  const std::string index_text = read_bytes(checkpoint + "/model.safetensors.index.json");
  const json index = json::parse(index_text);
  const json expected_index = {{"metadata", {{"total_size", 5 * 64}}},
                               {"weight_map",
                                {{"layers.1.w", shard_files[0]},
                                 {"layers.0.w", shard_files[0]},
                                 {"embed", shard_files[1]},
                                 {"norm", shard_files[1]},
                                 {"head", shard_files[2]}}}};
  EXPECT_EQ(index, expected_index);
  EXPECT_EQ(index_text, expected_index.dump(2) + "\n") << "formatted as transformers writes it";

  for (const std::string& file : shard_files) {
    SafetensorsFile shard = SafetensorsFile::open(checkpoint + "/" + file);
    EXPECT_EQ(shard.metadata(), (ooze::SafetensorsMetadata{{"format", "pt"}, {"step", "3"}}));
  }

  ShardedSafetensors loaded = ShardedSafetensors::open(checkpoint);
  EXPECT_EQ(loaded.names().size(), tensors.size());
  for (const auto& [name, expected] : tensors) {
    EXPECT_TRUE(at::equal(loaded.tensor(name), expected)) << name;
    EXPECT_EQ(loaded.file_of(name), index["weight_map"][name]) << name;
    EXPECT_EQ(loaded.info(name).nbytes(), 64u);
  }
  EXPECT_FALSE(loaded.contains("missing"));
  EXPECT_THROW(loaded.tensor("missing"), ooze::Error);
}

TEST_F(SafetensorsTest, OversizedTensorGetsAShardOfItsOwn) {
  const NamedTensors tensors = {
      {"small.a", at::ones({4})}, {"huge", at::ones({100})}, {"small.b", at::ones({4})}};
  ooze::save_sharded_safetensors(path("ckpt"), tensors, /*max_shard_bytes=*/64);
  const json index = json::parse(read_bytes(path("ckpt/model.safetensors.index.json")));
  EXPECT_EQ(index["weight_map"]["small.a"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["huge"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["small.b"], "model-00003-of-00003.safetensors");
  ShardedSafetensors loaded = ShardedSafetensors::open(path("ckpt"));
  EXPECT_TRUE(at::equal(loaded.tensor("huge"), at::ones({100})));
}

TEST_F(SafetensorsTest, SingleShardIsPlainModelSafetensors) {
  const NamedTensors tensors = five_tensors();
  const std::string checkpoint = path("ckpt");
  // First a sharded save, then a single-file one into the same directory: the stale index and
  // shards must go, or open() would read the old weights.
  ooze::save_sharded_safetensors(checkpoint, tensors, /*max_shard_bytes=*/100);
  ASSERT_TRUE(fs::exists(checkpoint + "/model.safetensors.index.json"));
  NamedTensors doubled;
  for (const auto& [name, tensor] : tensors) doubled.emplace_back(name, tensor * 2);
  ooze::save_sharded_safetensors(checkpoint, doubled, /*max_shard_bytes=*/1 << 20);

  std::vector<std::string> listed;
  for (const auto& entry : fs::directory_iterator(checkpoint)) {
    listed.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(listed, std::vector<std::string>{"model.safetensors"});
  ShardedSafetensors loaded = ShardedSafetensors::open(checkpoint);
  for (const auto& [name, expected] : doubled) {
    EXPECT_TRUE(at::equal(loaded.tensor(name), expected)) << name;
    EXPECT_EQ(loaded.file_of(name), "model.safetensors");
  }
}

TEST_F(SafetensorsTest, MissingShardFileIsReportedWithTensorAndFile) {
  const std::string checkpoint = path("ckpt");
  ooze::save_sharded_safetensors(checkpoint, five_tensors(), /*max_shard_bytes=*/150);
  fs::remove(checkpoint + "/model-00002-of-00003.safetensors");
  expect_format_error([&] { ShardedSafetensors::open(checkpoint); },
                      {"model-00002-of-00003.safetensors", "does not exist"});
  try {
    ShardedSafetensors::open(checkpoint);
  } catch (const FormatError& e) {
    const std::string message = e.what();
    EXPECT_TRUE(message.find("'embed'") != std::string::npos ||
                message.find("'norm'") != std::string::npos)
        << message;
  }
}

TEST_F(SafetensorsTest, IndexNamingATensorAbsentFromItsShardIsReported) {
  const std::string checkpoint = path("ckpt");
  ooze::save_sharded_safetensors(checkpoint, five_tensors(), /*max_shard_bytes=*/150);
  const std::string index_path = checkpoint + "/model.safetensors.index.json";
  json index = json::parse(read_bytes(index_path));
  index["weight_map"]["ghost.weight"] = "model-00001-of-00003.safetensors";
  write_bytes(index_path, index.dump());
  expect_format_error([&] { ShardedSafetensors::open(checkpoint); },
                      {"'ghost.weight'", "model-00001-of-00003.safetensors", "no such tensor"});
}

TEST_F(SafetensorsTest, MalformedIndexIsAFormatError) {
  const std::string checkpoint = path("ckpt");
  ooze::save_sharded_safetensors(checkpoint, five_tensors(), /*max_shard_bytes=*/150);
  const std::string index_path = checkpoint + "/model.safetensors.index.json";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"{not json", {"not valid JSON"}},
      {R"({"metadata":{}})", {"weight_map"}},
      {R"({"weight_map":{"head":3}})", {"'head'", "instead of a file name"}},
      {R"({"weight_map":{"head":"../model-00003-of-00003.safetensors"}})",
       {"'head'", "not a file name"}},
  };
  for (const auto& [text, needles] : cases) {
    SCOPED_TRACE(text);
    write_bytes(index_path, text);
    expect_format_error([&] { ShardedSafetensors::open(checkpoint); }, needles);
  }
}

TEST_F(SafetensorsTest, DirectoryWithoutCheckpointIsAnIoError) {
  EXPECT_THROW(ShardedSafetensors::open(dir_), ooze::IoError);
}

}  // namespace safetensors_test
