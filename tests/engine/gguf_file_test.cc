// GgufFile: round trips through GgufWriter, one test per malformed-file case (status code, and a
// message naming the problem, the key or tensor and the byte offset), a truncation sweep, and the
// real default model.
#include "engine/gguf_file.h"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/gguf_value.h"
#include "engine/gguf_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/dtype.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace baton::engine {
namespace {

using kernels::DType;
using test_support::IsOkAndHolds;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr uint64_t kHeaderBytes = 24;  // magic, version, tensor count, metadata count

// Bytes a metadata entry takes before its payload: key length, key, value type.
uint64_t EntryPrefixBytes(std::string_view key) { return 8 + key.size() + 4; }

template <typename T>
void PutAt(std::string* bytes, uint64_t offset, T v) {
  ASSERT_LE(offset + sizeof(T), bytes->size());
  std::memcpy(bytes->data() + offset, &v, sizeof(T));
}

template <typename T>
std::string Encode(T v) {
  std::string s(sizeof(T), '\0');
  std::memcpy(s.data(), &v, sizeof(T));
  return s;
}

absl::StatusOr<std::unique_ptr<GgufFile>> Parse(const std::string& bytes) {
  return GgufFile::FromBytes(bytes, "test.gguf");
}

// Asserts INVALID_ARGUMENT whose message contains every one of `parts`.
void ExpectInvalid(const std::string& bytes, const std::vector<std::string>& parts) {
  const auto file = Parse(bytes);
  ASSERT_FALSE(file.ok()) << "a malformed file was accepted";
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
  const std::string message(file.status().message());
  EXPECT_THAT(message, HasSubstr("gguf: "));
  EXPECT_THAT(message, HasSubstr("test.gguf"));
  for (const std::string& p : parts) EXPECT_THAT(message, HasSubstr(p));
}

// ---------------------------------------------------------------------------------------------
// Good files.

TEST(GgufFileTest, RoundTripsEveryScalarType) {
  GgufWriter w;
  w.AddUint8("u8", 255);
  w.AddInt8("i8", -128);
  w.AddUint16("u16", 65535);
  w.AddInt16("i16", -32768);
  w.AddUint32("u32", 4294967295u);
  w.AddInt32("i32", std::numeric_limits<int32_t>::min());
  w.AddUint64("u64", std::numeric_limits<uint64_t>::max());
  w.AddInt64("i64", std::numeric_limits<int64_t>::min());
  w.AddFloat32("f32", 3.5f);
  w.AddFloat64("f64", -1e300);
  w.AddBool("yes", true);
  w.AddBool("no", false);
  w.AddString("str", std::string("h\xc3\xa9llo\0world", 12));
  w.AddString("empty", "");
  const auto file = Parse(w.Build());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_TRUE(f.tensors().empty());

  const std::vector<std::pair<std::string, GgufValueType>> want = {
      {"u8", GgufValueType::kUint8},    {"i8", GgufValueType::kInt8},
      {"u16", GgufValueType::kUint16},  {"i16", GgufValueType::kInt16},
      {"u32", GgufValueType::kUint32},  {"i32", GgufValueType::kInt32},
      {"u64", GgufValueType::kUint64},  {"i64", GgufValueType::kInt64},
      {"f32", GgufValueType::kFloat32}, {"f64", GgufValueType::kFloat64},
      {"yes", GgufValueType::kBool},    {"no", GgufValueType::kBool},
      {"str", GgufValueType::kString},  {"empty", GgufValueType::kString}};
  ASSERT_EQ(f.metadata().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(f.metadata()[i].first, want[i].first);  // file order
    EXPECT_EQ(f.metadata()[i].second.type(), want[i].second) << want[i].first;
  }
  EXPECT_EQ(f.Find("u8")->as_unsigned(), 255u);
  EXPECT_EQ(f.Find("i8")->as_signed(), -128);
  EXPECT_EQ(f.Find("u16")->as_unsigned(), 65535u);
  EXPECT_EQ(f.Find("i16")->as_signed(), -32768);
  EXPECT_EQ(f.Find("u32")->as_unsigned(), 4294967295u);
  EXPECT_EQ(f.Find("i32")->as_signed(), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(f.Find("u64")->as_unsigned(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f.Find("i64")->as_signed(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f.Find("f32")->as_float(), 3.5);
  EXPECT_EQ(f.Find("f64")->as_float(), -1e300);
  EXPECT_TRUE(f.Find("yes")->as_bool());
  EXPECT_FALSE(f.Find("no")->as_bool());
  EXPECT_EQ(f.Find("str")->as_string(), std::string("h\xc3\xa9llo\0world", 12));
  EXPECT_EQ(f.Find("empty")->as_string(), "");
  EXPECT_EQ(f.Find("absent"), nullptr);
}

GgufValue U8(uint8_t v) { return GgufValue::Uint(GgufValueType::kUint8, v); }

GgufValue ArrayOf(GgufValueType type, std::vector<GgufValue> values) {
  return GgufValue::MakeArray({type, std::move(values)});
}

TEST(GgufFileTest, RoundTripsArraysIncludingNested) {
  GgufWriter w;
  w.AddStringArray("tokens", {"a", "", "\xe2\x96\x81the", std::string(300, 'x')});
  w.AddInt32Array("types", {1, -2, 3});
  w.AddFloat32Array("scores", {0.5f, -1.25f});
  w.Add("empty", ArrayOf(GgufValueType::kUint64, {}));
  w.Add("bools", ArrayOf(GgufValueType::kBool, {GgufValue::Bool(true), GgufValue::Bool(false)}));
  // [[1, 2], [], [3]] and a 3-deep [[["x"]]].
  w.Add("nested", ArrayOf(GgufValueType::kArray, {ArrayOf(GgufValueType::kUint8, {U8(1), U8(2)}),
                                                  ArrayOf(GgufValueType::kUint8, {}),
                                                  ArrayOf(GgufValueType::kUint8, {U8(3)})}));
  w.Add("deep", ArrayOf(GgufValueType::kArray,
                        {ArrayOf(GgufValueType::kArray,
                                 {ArrayOf(GgufValueType::kString, {GgufValue::String("x")})})}));
  const auto file = Parse(w.Build());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;

  auto tokens = f.GetArray("tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ((*tokens)->element_type, GgufValueType::kString);
  ASSERT_EQ((*tokens)->values.size(), 4u);
  EXPECT_EQ((*tokens)->values[2].as_string(), "\xe2\x96\x81the");
  EXPECT_EQ((*tokens)->values[3].as_string(), std::string(300, 'x'));

  const GgufValue::Array& types = f.Find("types")->as_array();
  EXPECT_EQ(types.element_type, GgufValueType::kInt32);
  ASSERT_EQ(types.values.size(), 3u);
  EXPECT_EQ(types.values[1].as_signed(), -2);
  EXPECT_EQ(types.values[1].type(), GgufValueType::kInt32);

  const GgufValue::Array& scores = f.Find("scores")->as_array();
  EXPECT_EQ(scores.values[1].as_float(), -1.25);

  EXPECT_EQ(f.Find("empty")->as_array().element_type, GgufValueType::kUint64);
  EXPECT_TRUE(f.Find("empty")->as_array().values.empty());
  EXPECT_FALSE(f.Find("bools")->as_array().values[1].as_bool());

  const GgufValue::Array& nested = f.Find("nested")->as_array();
  EXPECT_EQ(nested.element_type, GgufValueType::kArray);
  ASSERT_EQ(nested.values.size(), 3u);
  EXPECT_EQ(nested.values[0].as_array().values[1].as_unsigned(), 2u);
  EXPECT_TRUE(nested.values[1].as_array().values.empty());
  EXPECT_EQ(nested.values[2].as_array().values[0].as_unsigned(), 3u);
  EXPECT_EQ(nested.values[1].as_array().element_type, GgufValueType::kUint8);

  const GgufValue& deep = *f.Find("deep");
  EXPECT_EQ(deep.as_array().values[0].as_array().values[0].as_array().values[0].as_string(), "x");
}

TEST(GgufFileTest, ArraysNestedToTheLimitAreAccepted) {
  GgufValue v = ArrayOf(GgufValueType::kUint8, {U8(7)});
  for (int depth = 1; depth < GgufFile::kMaxArrayNesting; ++depth) {
    v = ArrayOf(GgufValueType::kArray, {v});
  }
  GgufWriter w;
  w.Add("deep", v);
  const auto file = Parse(w.Build());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufValue* p = (*file)->Find("deep");
  for (int depth = 1; depth < GgufFile::kMaxArrayNesting; ++depth) p = &p->as_array().values[0];
  EXPECT_EQ(p->as_array().values[0].as_unsigned(), 7u);
}

TEST(GgufFileTest, TypedGetters) {
  GgufWriter w;
  w.AddString("name", "tiny");
  w.AddUint32("u32", 7);
  w.AddInt32("pos", 5);
  w.AddInt32("neg", -5);
  w.AddUint64("huge", std::numeric_limits<uint64_t>::max());
  w.AddFloat32("eps", 1e-5f);
  w.AddBool("flag", true);
  w.AddInt32Array("arr", {1, 2});
  const auto file = Parse(w.Build());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;

  EXPECT_THAT(f.GetString("name"), IsOkAndHolds("tiny"));
  EXPECT_THAT(f.GetUint("u32"), IsOkAndHolds(7u));
  EXPECT_THAT(f.GetUint("pos"), IsOkAndHolds(5u));  // a signed type whose value fits
  EXPECT_THAT(f.GetInt("u32"), IsOkAndHolds(7));
  EXPECT_THAT(f.GetInt("neg"), IsOkAndHolds(-5));
  EXPECT_THAT(f.GetUint("huge"), IsOkAndHolds(std::numeric_limits<uint64_t>::max()));
  EXPECT_THAT(f.GetFloat("eps"), IsOkAndHolds(static_cast<double>(1e-5f)));
  EXPECT_THAT(f.GetFloat("u32"), IsOkAndHolds(7.0));  // integers are numbers too
  EXPECT_THAT(f.GetFloat("neg"), IsOkAndHolds(-5.0));
  EXPECT_THAT(f.GetBool("flag"), IsOkAndHolds(true));
  absl::StatusOr<const GgufValue::Array*> arr = f.GetArray("arr");
  ASSERT_TRUE(arr.ok()) << arr.status();
  EXPECT_EQ((*arr)->values.size(), 2u);

  // Absent: NOT_FOUND naming the key.
  for (const absl::Status& s :
       {f.GetString("nope").status(), f.GetUint("nope").status(), f.GetInt("nope").status(),
        f.GetFloat("nope").status(), f.GetBool("nope").status(), f.GetArray("nope").status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(s.message(), HasSubstr("'nope'"));
  }
  // Wrong type: INVALID_ARGUMENT naming the key, the actual and the expected type.
  const absl::Status wrong = f.GetString("u32").status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.message(), AllOf(HasSubstr("'u32'"), HasSubstr("uint32"), HasSubstr("string")));
  EXPECT_EQ(f.GetUint("neg").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(f.GetUint("neg").status().message(), AllOf(HasSubstr("'neg'"), HasSubstr("-5")));
  EXPECT_EQ(f.GetInt("huge").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(f.GetInt("huge").status().message(), HasSubstr("'huge'"));
  EXPECT_EQ(f.GetUint("name").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetInt("eps").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetFloat("flag").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetBool("u32").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.GetArray("name").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(f.GetArray("name").status().message(),
              AllOf(HasSubstr("'name'"), HasSubstr("array")));
}

TEST(GgufFileTest, TensorDirectory) {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  const std::vector<float> f32 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  ASSERT_TRUE(w.AddTensorF32("a.f32", {4, 3}, f32).ok());
  ASSERT_TRUE(w.AddTensor("b.f16", DType::kF16, {5}, std::string(10, '\x3c')).ok());
  ASSERT_TRUE(w.AddTensor("c.q4_0", DType::kQ4_0, {64, 2}, std::string(4 * 18, '\x11')).ok());
  ASSERT_TRUE(w.AddTensor("d.q4_k", DType::kQ4_K, {256, 1, 1, 2}, std::string(2 * 144, 'k')).ok());
  const std::string bytes = w.Build();
  const auto file = Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.file_size(), bytes.size());

  const GgufTensorInfo& a = f.tensors()[0];
  EXPECT_EQ(a.name, "a.f32");
  EXPECT_EQ(a.dims, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(a.dtype, DType::kF32);
  EXPECT_EQ(a.n_elements, 12u);
  EXPECT_EQ(a.n_bytes, 48u);
  EXPECT_EQ(a.row_length(), 4);
  EXPECT_EQ(a.n_rows(), 3);
  EXPECT_EQ(a.offset_in_data, 0u);
  EXPECT_EQ(std::memcmp(a.data, f32.data(), 48), 0);

  const GgufTensorInfo& b = f.tensors()[1];
  EXPECT_EQ(b.dtype, DType::kF16);
  EXPECT_EQ(b.n_bytes, 10u);
  EXPECT_EQ(b.offset_in_data, 64u);  // 48 rounded up to 32

  const GgufTensorInfo& c = f.tensors()[2];
  EXPECT_EQ(c.dtype, DType::kQ4_0);
  EXPECT_EQ(c.n_elements, 128u);
  EXPECT_EQ(c.n_bytes, 72u);
  EXPECT_EQ(c.n_rows(), 2);
  EXPECT_EQ(c.offset_in_data, 96u);

  const GgufTensorInfo& d = f.tensors()[3];
  EXPECT_EQ(d.dims, (std::vector<int64_t>{256, 1, 1, 2}));
  EXPECT_EQ(d.n_bytes, 288u);
  EXPECT_EQ(d.n_rows(), 2);
  EXPECT_EQ(d.offset_in_data, 192u);

  const uint64_t data_start = a.offset_in_file;
  EXPECT_EQ(data_start % 32, 0u);
  for (const GgufTensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.offset_in_file, data_start + t.offset_in_data) << t.name;
    EXPECT_EQ(t.offset_in_file % 32, 0u) << t.name;
    EXPECT_EQ(t.data, reinterpret_cast<const uint8_t*>(f.FindTensor(t.name)->data));
    // The data pointer is the right bytes of the file.
    EXPECT_EQ(std::memcmp(t.data, bytes.data() + t.offset_in_file, t.n_bytes), 0) << t.name;
  }
  EXPECT_EQ(f.FindTensor("c.q4_0"), &f.tensors()[2]);
  EXPECT_EQ(f.FindTensor("nope"), nullptr);
  EXPECT_THAT(f.GetString("general.architecture"), IsOkAndHolds("llama"));
}

TEST(GgufFileTest, CustomAlignment) {
  GgufWriter w(GgufWriter::Options{.alignment = 64});
  ASSERT_TRUE(w.AddTensorF32("x", {3}, {1, 2, 3}).ok());
  ASSERT_TRUE(w.AddTensorF32("y", {5}, {1, 2, 3, 4, 5}).ok());
  const auto file = Parse(w.Build());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_THAT(f.GetUint("general.alignment"), IsOkAndHolds(64u));
  EXPECT_EQ(f.Find("general.alignment")->type(), GgufValueType::kUint32);
  EXPECT_EQ(f.tensors()[1].offset_in_data, 64u);
  for (const GgufTensorInfo& t : f.tensors()) EXPECT_EQ(t.offset_in_file % 64, 0u) << t.name;
  EXPECT_EQ(reinterpret_cast<const float*>(f.tensors()[1].data)[4], 5.0f);
}

TEST(GgufFileTest, AlignmentOfOneIsAccepted) {
  GgufWriter w(GgufWriter::Options{.alignment = 1});
  ASSERT_TRUE(w.AddTensor("x", DType::kF16, {3}, "abcdef").ok());
  ASSERT_TRUE(w.AddTensor("y", DType::kF16, {1}, "gh").ok());
  const auto file = Parse(w.Build());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->alignment(), 1u);
  EXPECT_EQ((*file)->tensors()[1].offset_in_data, 6u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*file)->tensors()[1].data), 2), "gh");
}

TEST(GgufFileTest, VersionTwoIsAccepted) {
  GgufWriter w(GgufWriter::Options{.version = 2});
  w.AddString("general.name", "v2");
  ASSERT_TRUE(w.AddTensorF32("x", {2}, {1, 2}).ok());
  const auto file = Parse(w.Build());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->version(), 2u);
}

TEST(GgufFileTest, MetadataOnlyFileOpens) {
  GgufWriter w;
  w.AddStringArray("tokenizer.ggml.tokens", {"<s>", "</s>"});
  std::string bytes = w.Build();
  auto file = Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->tensors().empty());
  // Without the trailing padding, too.
  const uint64_t end = kHeaderBytes + EntryPrefixBytes("tokenizer.ggml.tokens") + 4 + 8 + 11 + 12;
  ASSERT_LE(end, bytes.size());
  file = Parse(bytes.substr(0, end));
  ASSERT_TRUE(file.ok()) << file.status();
}

TEST(GgufFileTest, HeaderOnlyFileOpens) {
  const auto file = Parse(GgufWriter().Build());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->metadata().empty());
  EXPECT_TRUE((*file)->tensors().empty());
}

TEST(GgufFileTest, OverlappingTensorsAreAllowed) {
  GgufWriter w;
  ASSERT_TRUE(w.AddTensorF32("x", {8}, {1, 2, 3, 4, 5, 6, 7, 8}).ok());
  w.AddRawTensorInfo("x_alias", {4, 2}, static_cast<uint32_t>(DType::kF32), 0);
  w.AddRawTensorInfo("x_half", {4}, static_cast<uint32_t>(DType::kF32), 0);
  const auto file = Parse(w.Build());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->FindTensor("x_alias")->data, (*file)->FindTensor("x")->data);
  EXPECT_EQ((*file)->FindTensor("x_half")->n_bytes, 16u);
}

TEST(GgufFileTest, OpenMapsAFile) {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  ASSERT_TRUE(w.AddTensorF32("x", {4}, {1, 2, 3, 4}).ok());
  const std::string path = ::testing::TempDir() + "/gguf_file_test_open.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());
  const auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->path(), path);
  EXPECT_EQ((*file)->file_size(), w.Build().size());
  EXPECT_THAT((*file)->GetString("general.architecture"), IsOkAndHolds("llama"));
  EXPECT_EQ(reinterpret_cast<const float*>((*file)->FindTensor("x")->data)[3], 4.0f);
  std::remove(path.c_str());
}

// Pages let go from memory come back from the file with the same bytes; a copy made by
// FromBytes (not a mapping) and ranges outside the file are left as they are.
TEST(GgufFileTest, DroppedPagesReadBackTheSameBytes) {
  std::vector<float> values(64 * 1024);  // 256 KB: many whole pages
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  ASSERT_TRUE(w.AddTensorF32("x", {static_cast<int64_t>(values.size())}, values).ok());
  const std::string path = ::testing::TempDir() + "/gguf_file_test_drop.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());
  const auto mapped = GgufFile::Open(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  const auto copied = GgufFile::FromBytes(w.Build());
  ASSERT_TRUE(copied.ok()) << copied.status();
  for (const auto* file : {&*mapped, &*copied}) {
    const GgufTensorInfo* x = (*file)->FindTensor("x");
    const auto* data = reinterpret_cast<const float*>(x->data);
    ASSERT_EQ(data[values.size() - 1], values.back());  // resident before the drop
    (*file)->DropResidentPages(x->data, x->n_bytes);
    (*file)->DropResidentPages(x->data + x->n_bytes, (*file)->file_size());  // past the end
    (*file)->DropResidentPages(values.data(), 4096);                         // not the file's
    EXPECT_EQ(0, std::memcmp(data, values.data(), values.size() * sizeof(float)));
  }
  std::remove(path.c_str());
}

// Released metadata is gone; the header's pages are let go (the vocabulary below spans many)
// and the tensors' names and bytes stay.
TEST(GgufFileTest, ReleasedMetadataLeavesTheTensors) {
  std::vector<std::string> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = absl::StrCat("token", i);
  const std::vector<float> values = {1, 2, 3, 4, 5, 6, 7, 8};
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddStringArray("tokenizer.ggml.tokens", tokens);
  ASSERT_TRUE(w.AddTensorF32("x", {8}, values).ok());
  const std::string path = ::testing::TempDir() + "/gguf_file_test_release.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());
  const auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_GT((*file)->FindTensor("x")->offset_in_file, 2 * 4096u);
  (*file)->ReleaseMetadata();
  const GgufFile& f = **file;
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(f.Find("general.architecture"), nullptr);
  EXPECT_EQ(f.GetArray("tokenizer.ggml.tokens").status().code(), absl::StatusCode::kNotFound);
  ASSERT_NE(f.FindTensor("x"), nullptr);
  EXPECT_EQ(std::memcmp(f.FindTensor("x")->data, values.data(), values.size() * sizeof(float)),
            0);
  std::remove(path.c_str());
}

TEST(GgufFileTest, OpenMissingFileIsNotFound) {
  const auto file = GgufFile::Open(::testing::TempDir() + "/does/not/exist.gguf");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr("does/not/exist.gguf"));
}

TEST(GgufFileTest, OpenDirectoryIsInvalid) {
  const auto file = GgufFile::Open(::testing::TempDir());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GgufFileTest, OpenMalformedFileNamesThePath) {
  const std::string path = ::testing::TempDir() + "/gguf_file_test_bad.gguf";
  std::ofstream(path, std::ios::binary) << "GGUF\x01";
  const auto file = GgufFile::Open(path);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(), AllOf(HasSubstr(path), HasSubstr("truncated")));
  std::remove(path.c_str());
  std::ofstream(path, std::ios::binary).flush();  // empty file
  EXPECT_EQ(GgufFile::Open(path).status().code(), absl::StatusCode::kInvalidArgument);
  std::remove(path.c_str());
}

TEST(GgufValueTest, DebugString) {
  EXPECT_EQ(GgufValue::Uint(GgufValueType::kUint32, 7).DebugString(), "7");
  EXPECT_EQ(GgufValue::Int(GgufValueType::kInt8, -3).DebugString(), "-3");
  EXPECT_EQ(GgufValue::Float(GgufValueType::kFloat32, 0.5).DebugString(), "0.5");
  EXPECT_EQ(GgufValue::Bool(true).DebugString(), "true");
  EXPECT_EQ(GgufValue::String("a\"b\n").DebugString(), "\"a\\\"b\\n\"");
  EXPECT_THAT(GgufValue::String(std::string(500, 'z')).DebugString(), HasSubstr("500 bytes"));
  // Long strings are cut at a UTF-8 character boundary.
  EXPECT_EQ(GgufValue::String(std::string(79, 'a') + "\xc3\xa9zz").DebugString(),
            "\"" + std::string(79, 'a') + "\"... (83 bytes)");
  std::vector<GgufValue> many;
  for (int i = 0; i < 20; ++i) many.push_back(GgufValue::Int(GgufValueType::kInt32, i));
  const std::string s = ArrayOf(GgufValueType::kInt32, many).DebugString(3);
  EXPECT_EQ(s, "[0, 1, 2, ...] (20 x int32)");
  EXPECT_EQ(ArrayOf(GgufValueType::kString, {}).DebugString(), "[] (0 x string)");
  EXPECT_EQ(GgufValueTypeName(GgufValueType::kFloat64), "float64");
}

// ---------------------------------------------------------------------------------------------
// Malformed files: one test per problem.

std::string OneKeyFile(std::string_view key = "general.name", std::string value = "tiny") {
  GgufWriter w;
  w.AddString(std::string(key), std::move(value));
  return w.Build();
}

TEST(GgufFileBadTest, EmptyFile) { ExpectInvalid("", {"truncated", "magic", "offset 0"}); }

TEST(GgufFileBadTest, BadMagic) {
  std::string bytes = OneKeyFile();
  bytes[3] = 'X';
  ExpectInvalid(bytes, {"bad magic", "offset 0", "header"});
}

TEST(GgufFileBadTest, VersionOneIsRejected) {
  GgufWriter w(GgufWriter::Options{.version = 1});
  ExpectInvalid(w.Build(), {"version 1", "not supported", "offset 4"});
}

TEST(GgufFileBadTest, UnknownVersion) {
  GgufWriter w(GgufWriter::Options{.version = 4});
  ExpectInvalid(w.Build(), {"unsupported version 4", "offset 4"});
  GgufWriter zero(GgufWriter::Options{.version = 0});
  ExpectInvalid(zero.Build(), {"unsupported version 0", "offset 4"});
}

TEST(GgufFileBadTest, BigEndianVersion) {
  GgufWriter w(GgufWriter::Options{.version = 0x03000000});
  ExpectInvalid(w.Build(), {"big-endian", "offset 4"});
}

TEST(GgufFileBadTest, TruncatedHeader) {
  const std::string bytes = OneKeyFile();
  ExpectInvalid(bytes.substr(0, 6), {"truncated", "version", "offset 4"});
  ExpectInvalid(bytes.substr(0, 12), {"truncated", "tensor count", "offset 8"});
  ExpectInvalid(bytes.substr(0, 20), {"truncated", "metadata count", "offset 16"});
}

TEST(GgufFileBadTest, MetadataCountLargerThanFileCanHold) {
  std::string bytes = OneKeyFile();
  PutAt<uint64_t>(&bytes, 16, uint64_t{1} << 40);
  ExpectInvalid(bytes, {"metadata count 1099511627776", "offset 16", "impossible"});
  PutAt<uint64_t>(&bytes, 16, std::numeric_limits<uint64_t>::max());
  ExpectInvalid(bytes, {"metadata count 18446744073709551615", "offset 16"});
}

TEST(GgufFileBadTest, TensorCountLargerThanFileCanHold) {
  std::string bytes = OneKeyFile();
  PutAt<uint64_t>(&bytes, 8, uint64_t{1} << 40);
  ExpectInvalid(bytes, {"tensor count 1099511627776", "offset 8", "impossible"});
  PutAt<uint64_t>(&bytes, 8, std::numeric_limits<uint64_t>::max());
  ExpectInvalid(bytes, {"tensor count 18446744073709551615", "offset 8"});
}

TEST(GgufFileBadTest, CountsTogetherLargerThanFileCanHold) {
  // Each count alone fits the remaining bytes, both together do not.
  std::string bytes = OneKeyFile("k", std::string(200, 'v'));
  const uint64_t left = bytes.size() - kHeaderBytes;
  PutAt<uint64_t>(&bytes, 8, left / 32);
  PutAt<uint64_t>(&bytes, 16, left / 13);
  ExpectInvalid(bytes, {"tensor count", "metadata count", "offset 8", "offset 16"});
}

TEST(GgufFileBadTest, KeyLengthLargerThanFile) {
  std::string bytes = OneKeyFile();
  PutAt<uint64_t>(&bytes, kHeaderBytes, uint64_t{1} << 40);
  ExpectInvalid(bytes,
                {"metadata entry #0", "key length 1099511627776", "offset 24", "larger than"});
  PutAt<uint64_t>(&bytes, kHeaderBytes, std::numeric_limits<uint64_t>::max());
  ExpectInvalid(bytes, {"metadata entry #0", "key length 18446744073709551615", "offset 24"});
}

TEST(GgufFileBadTest, StringValueLengthLargerThanFile) {
  std::string bytes = OneKeyFile("general.name", "tiny");
  const uint64_t length_at = kHeaderBytes + EntryPrefixBytes("general.name");
  PutAt<uint64_t>(&bytes, length_at, 5000);
  ExpectInvalid(bytes, {"key 'general.name'", "string value length 5000",
                        absl::StrCat("offset ", length_at)});
}

TEST(GgufFileBadTest, ArrayLengthLargerThanFile) {
  // uint32 elements: 4 bytes each. The length is checked before anything is allocated.
  GgufWriter w;
  w.AddRawMetadata("arr", static_cast<uint32_t>(GgufValueType::kArray),
                   Encode<uint32_t>(static_cast<uint32_t>(GgufValueType::kUint32)) +
                       Encode<uint64_t>(uint64_t{1} << 60) + std::string(16, '\0'));
  const uint64_t length_at = kHeaderBytes + EntryPrefixBytes("arr") + 4;
  ExpectInvalid(w.Build(), {"key 'arr'", "array length 1152921504606846976",
                            absl::StrCat("offset ", length_at), "uint32"});
}

TEST(GgufFileBadTest, ArrayLengthWhoseByteSizeOverflows) {
  GgufWriter w;
  w.AddRawMetadata("arr", static_cast<uint32_t>(GgufValueType::kArray),
                   Encode<uint32_t>(static_cast<uint32_t>(GgufValueType::kUint64)) +
                       Encode<uint64_t>((uint64_t{1} << 61) + 1) + std::string(64, '\0'));
  ExpectInvalid(w.Build(), {"key 'arr'", "array length 2305843009213693953"});
}

TEST(GgufFileBadTest, StringArrayLengthLargerThanFile) {
  // Each string takes at least its 8-byte length: 10 strings cannot fit in 40 bytes.
  GgufWriter w;
  w.AddRawMetadata("tokens", static_cast<uint32_t>(GgufValueType::kArray),
                   Encode<uint32_t>(static_cast<uint32_t>(GgufValueType::kString)) +
                       Encode<uint64_t>(10) + std::string(40, '\0'));
  ExpectInvalid(w.Build(), {"key 'tokens'", "array length 10", "string"});
}

TEST(GgufFileBadTest, ArrayElementStringLengthLargerThanFile) {
  GgufWriter w;
  w.AddStringArray("tokens", {"a", "b", "c"});
  std::string bytes = w.Build();
  // Element 1's length field: after the entry prefix, element type, count, and element 0.
  const uint64_t at = kHeaderBytes + EntryPrefixBytes("tokens") + 4 + 8 + 8 + 1;
  PutAt<uint64_t>(&bytes, at, 1000);
  ExpectInvalid(
      bytes, {"key 'tokens' element [1]", "string value length 1000", absl::StrCat("offset ", at)});
}

TEST(GgufFileBadTest, ArraysNestedTooDeep) {
  // kMaxArrayNesting + 1 levels: arrays of one array, innermost an empty uint8 array.
  std::string payload;
  for (int i = 0; i < GgufFile::kMaxArrayNesting; ++i) {
    payload += Encode<uint32_t>(static_cast<uint32_t>(GgufValueType::kArray)) + Encode<uint64_t>(1);
  }
  payload += Encode<uint32_t>(static_cast<uint32_t>(GgufValueType::kUint8)) + Encode<uint64_t>(0);
  GgufWriter w;
  w.AddRawMetadata("deep", static_cast<uint32_t>(GgufValueType::kArray), payload);
  // The array that would hold the 9th level starts at the 8th level's element type.
  const uint64_t at =
      kHeaderBytes + EntryPrefixBytes("deep") + 12 * (GgufFile::kMaxArrayNesting - 1);
  ExpectInvalid(w.Build(), {"key 'deep'", "nested more than 8", absl::StrCat("offset ", at)});
}

TEST(GgufFileBadTest, UnknownValueType) {
  GgufWriter w;
  w.AddUint8("ok", 1);
  w.AddRawMetadata("weird", 13, "\x01");
  const uint64_t at = kHeaderBytes + EntryPrefixBytes("ok") + 1 + EntryPrefixBytes("weird") - 4;
  ExpectInvalid(w.Build(), {"key 'weird'", "unknown value type 13", absl::StrCat("offset ", at)});
}

TEST(GgufFileBadTest, NegativeValueType) {
  GgufWriter w;
  w.AddRawMetadata("weird", 0xffffffffu, "\x01");
  ExpectInvalid(w.Build(), {"key 'weird'", "unknown value type 4294967295 (-1)", "offset 37"});
}

TEST(GgufFileBadTest, UnknownArrayElementType) {
  GgufWriter w;
  w.AddRawMetadata("arr", static_cast<uint32_t>(GgufValueType::kArray),
                   Encode<uint32_t>(99) + Encode<uint64_t>(0));
  const uint64_t at = kHeaderBytes + EntryPrefixBytes("arr");
  ExpectInvalid(w.Build(),
                {"key 'arr'", "unknown array element type 99", absl::StrCat("offset ", at)});
}

// A uint8 array metadata value of `count` elements (the bytes are all in the file).
std::string Uint8Array(uint64_t count) {
  return Encode<uint32_t>(static_cast<uint32_t>(GgufValueType::kUint8)) + Encode<uint64_t>(count) +
         std::string(count, '\x01');
}

TEST(GgufFileBadTest, MetadataArraysPastTheElementLimit) {
  // The limit applies to all arrays together, and is checked before anything is allocated.
  constexpr uint64_t kLimit = GgufFile::kMaxMetadataArrayElements;
  const uint32_t array = static_cast<uint32_t>(GgufValueType::kArray);
  GgufWriter one;
  one.AddRawMetadata("huge", array, Uint8Array(kLimit + 1));
  ExpectInvalid(one.Build(), {"key 'huge'", absl::StrCat("array length ", kLimit + 1),
                              absl::StrCat("past ", kLimit, " array elements")});
  GgufWriter two;
  two.AddRawMetadata("small", array, Uint8Array(1000));
  two.AddRawMetadata("big", array, Uint8Array(kLimit - 999));
  ExpectInvalid(two.Build(), {"key 'big'", "(1000 before it)"});
}

TEST(GgufFileBadTest, BoolNeitherZeroNorOne) {
  GgufWriter w;
  w.AddRawMetadata("flag", static_cast<uint32_t>(GgufValueType::kBool), "\x02");
  const uint64_t at = kHeaderBytes + EntryPrefixBytes("flag");
  ExpectInvalid(w.Build(), {"key 'flag'", "bool value 2", absl::StrCat("offset ", at)});
}

TEST(GgufFileBadTest, DuplicateKey) {
  GgufWriter w;
  w.AddUint32("general.alignment_x", 1);
  w.AddString("dup", "a");
  w.AddString("dup", "b");
  const uint64_t first = kHeaderBytes + EntryPrefixBytes("general.alignment_x") + 4;
  const uint64_t second = first + EntryPrefixBytes("dup") + 8 + 1;
  ExpectInvalid(w.Build(), {"key 'dup'", "duplicate key", absl::StrCat("offset ", second),
                            absl::StrCat("first defined at offset ", first)});
}

TEST(GgufFileBadTest, AlignmentNotAPowerOfTwo) {
  GgufWriter w;
  w.AddUint32("general.alignment", 48);
  ExpectInvalid(w.Build(),
                {"key 'general.alignment'", "alignment 48", "power of two", "offset 24"});
}

TEST(GgufFileBadTest, AlignmentZero) {
  GgufWriter w;
  w.AddUint32("general.alignment", 0);
  ExpectInvalid(w.Build(), {"key 'general.alignment'", "alignment 0", "offset 24"});
}

TEST(GgufFileBadTest, AlignmentNegative) {
  GgufWriter w;
  w.AddInt32("general.alignment", -32);
  ExpectInvalid(w.Build(), {"key 'general.alignment'", "alignment -32", "offset 24"});
}

TEST(GgufFileBadTest, AlignmentWrongType) {
  GgufWriter w;
  w.AddString("general.alignment", "32");
  ExpectInvalid(w.Build(), {"key 'general.alignment'", "type string", "offset 24"});
}

// A file with one raw tensor info (no data) after one metadata entry; *info_at is where the
// tensor info starts.
std::string RawTensorFile(std::vector<uint64_t> dims, uint32_t type, uint64_t offset,
                          uint64_t* info_at = nullptr, std::string name = "blk.0.attn_q.weight") {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddRawTensorInfo(std::move(name), std::move(dims), type, offset);
  if (info_at != nullptr) {
    *info_at = kHeaderBytes + EntryPrefixBytes("general.architecture") + 8 + 5;
  }
  return w.Build();
}

constexpr uint32_t kF32Id = static_cast<uint32_t>(DType::kF32);

TEST(GgufFileBadTest, TensorNameLengthLargerThanFile) {
  uint64_t info_at;
  std::string bytes = RawTensorFile({4}, kF32Id, 0, &info_at);
  PutAt<uint64_t>(&bytes, info_at, 1u << 20);
  ExpectInvalid(bytes, {"tensor #0", "name length 1048576", absl::StrCat("offset ", info_at)});
}

TEST(GgufFileBadTest, DuplicateTensorName) {
  GgufWriter w;
  ASSERT_TRUE(w.AddTensorF32("w", {2}, {1, 2}).ok());
  ASSERT_TRUE(w.AddTensorF32("w", {2}, {3, 4}).ok());
  const uint64_t first = kHeaderBytes;
  const uint64_t second = first + 8 + 1 + 4 + 8 + 4 + 8;
  ExpectInvalid(w.Build(), {"tensor 'w'", "duplicate tensor name", absl::StrCat("offset ", second),
                            absl::StrCat("first defined at offset ", first)});
}

TEST(GgufFileBadTest, ZeroDims) {
  uint64_t info_at;
  const std::string bytes = RawTensorFile({}, kF32Id, 0, &info_at);
  const uint64_t n_dims_at = info_at + 8 + std::string("blk.0.attn_q.weight").size();
  ExpectInvalid(bytes,
                {"tensor 'blk.0.attn_q.weight'", "n_dims 0", absl::StrCat("offset ", n_dims_at)});
}

TEST(GgufFileBadTest, TooManyDims) {
  ExpectInvalid(RawTensorFile({1, 1, 1, 1, 1}, kF32Id, 0),
                {"tensor 'blk.0.attn_q.weight'", "n_dims 5", "not in [1, 4]"});
}

TEST(GgufFileBadTest, ZeroDim) {
  uint64_t info_at;
  const std::string bytes = RawTensorFile({4, 0}, kF32Id, 0, &info_at);
  const uint64_t dim1_at = info_at + 8 + 19 + 4 + 8;
  ExpectInvalid(bytes, {"tensor 'blk.0.attn_q.weight'", "dimension 1 is 0",
                        absl::StrCat("offset ", dim1_at), "positive"});
}

TEST(GgufFileBadTest, NegativeDim) {
  ExpectInvalid(RawTensorFile({std::numeric_limits<uint64_t>::max()}, kF32Id, 0),
                {"tensor 'blk.0.attn_q.weight'", "dimension 0 is -1"});
  ExpectInvalid(RawTensorFile({4, uint64_t{1} << 63}, kF32Id, 0),
                {"dimension 1 is -9223372036854775808"});
}

TEST(GgufFileBadTest, DimsProductOverflows) {
  uint64_t info_at;
  const std::string bytes =
      RawTensorFile({uint64_t{1} << 32, uint64_t{1} << 31, 4}, kF32Id, 0, &info_at);
  ExpectInvalid(bytes, {"tensor 'blk.0.attn_q.weight'", "overflows int64",
                        absl::StrCat("offset ", info_at + 8 + 19 + 4)});
}

TEST(GgufFileBadTest, ByteSizeOverflows) {
  // 2^61 f32 elements take 2^63 bytes: representable, and past the end of the file.
  ExpectInvalid(
      RawTensorFile({uint64_t{1} << 31, uint64_t{1} << 30}, kF32Id, 0),
      {"tensor 'blk.0.attn_q.weight'", "9223372036854775808 bytes", "extends past end of file"});
  // 2^62 f32 elements fit int64, their 2^64 bytes do not fit uint64.
  ExpectInvalid(RawTensorFile({uint64_t{1} << 62}, kF32Id, 0),
                {"tensor 'blk.0.attn_q.weight'", "byte size", "overflows"});
}

TEST(GgufFileBadTest, UnknownTensorType) {
  uint64_t info_at;
  const std::string bytes = RawTensorFile({32}, 4, 0, &info_at);  // GGML's removed Q4_2
  const uint64_t type_at = info_at + 8 + 19 + 4 + 8;
  ExpectInvalid(bytes, {"tensor 'blk.0.attn_q.weight'", "unknown tensor type 4",
                        absl::StrCat("offset ", type_at)});
  ExpectInvalid(RawTensorFile({32}, 1000, 0), {"unknown tensor type 1000"});
}

TEST(GgufFileBadTest, NegativeTensorType) {
  ExpectInvalid(RawTensorFile({32}, static_cast<uint32_t>(-3), 0),
                {"tensor 'blk.0.attn_q.weight'", "unknown tensor type 4294967293 (-3)"});
}

TEST(GgufFileBadTest, RowLengthNotAMultipleOfBlockSize) {
  uint64_t info_at;
  const std::string bytes =
      RawTensorFile({48, 2}, static_cast<uint32_t>(DType::kQ4_0), 0, &info_at);
  ExpectInvalid(bytes, {"tensor 'blk.0.attn_q.weight'", "row length 48", "q4_0 block size 32",
                        absl::StrCat("offset ", info_at + 8 + 19 + 4)});
  ExpectInvalid(RawTensorFile({128}, static_cast<uint32_t>(DType::kQ6_K), 0),
                {"row length 128", "q6_K block size 256"});
}

TEST(GgufFileBadTest, TensorOffsetNotAligned) {
  uint64_t info_at;
  const std::string bytes = RawTensorFile({4}, kF32Id, 8, &info_at);
  const uint64_t offset_at = info_at + 8 + 19 + 4 + 8 + 4;
  ExpectInvalid(bytes, {"tensor 'blk.0.attn_q.weight'", "data offset 8",
                        absl::StrCat("offset ", offset_at), "alignment 32"});
}

TEST(GgufFileBadTest, TensorOffsetNotAlignedToCustomAlignment) {
  GgufWriter w(GgufWriter::Options{.alignment = 64});
  w.AddRawTensorInfo("t", {4}, kF32Id, 32);
  ExpectInvalid(w.Build(), {"tensor 't'", "data offset 32", "alignment 64"});
}

TEST(GgufFileBadTest, TensorDataPastEndOfFile) {
  // The file ends where the data section starts: 1152 f32 bytes cannot fit.
  uint64_t info_at;
  const std::string bytes = RawTensorFile({32, 36}, kF32Id, 0, &info_at);
  const uint64_t size = bytes.size();
  ExpectInvalid(bytes, {"tensor 'blk.0.attn_q.weight'",
                        absl::StrCat("data [offset ", size, ", 4608 bytes] extends past end of ",
                                     "file (size ", size, ")"),
                        absl::StrCat("tensor info is at offset ", info_at)});
}

TEST(GgufFileBadTest, TensorDataOneBytePastEndOfFile) {
  GgufWriter w;
  ASSERT_TRUE(w.AddTensorF32("x", {8}, {1, 2, 3, 4, 5, 6, 7, 8}).ok());  // 32 bytes: no padding
  std::string bytes = w.Build();
  ASSERT_TRUE(Parse(bytes).ok());
  bytes.pop_back();
  ExpectInvalid(bytes, {"tensor 'x'", absl::StrCat("data [offset ", bytes.size() + 1 - 32,
                                                   ", 32 bytes] extends past end of file (size ",
                                                   bytes.size(), ")")});
}

TEST(GgufFileBadTest, TensorOffsetHuge) {
  // Data offset + section start overflows uint64.
  const std::string bytes = RawTensorFile({4}, kF32Id, std::numeric_limits<uint64_t>::max() - 31);
  ExpectInvalid(bytes, {"tensor 'blk.0.attn_q.weight'", "extends past end of file"});
  ExpectInvalid(RawTensorFile({4}, kF32Id, uint64_t{1} << 40),
                {"data [offset 1099511627", "extends past end of file"});
}

TEST(GgufFileBadTest, SecondTensorPastEnd) {
  GgufWriter w;
  ASSERT_TRUE(w.AddTensorF32("ok", {8}, {1, 2, 3, 4, 5, 6, 7, 8}).ok());
  w.AddRawTensorInfo("bad", {16}, kF32Id, 32);
  ExpectInvalid(w.Build(), {"tensor 'bad'", "extends past end of file"});
}

// ---------------------------------------------------------------------------------------------
// Sweeps over a file that uses every feature.

// A valid file with every value type, arrays (nested), and tensors whose data ends exactly at the
// end of the file (no trailing padding), so that every proper prefix is invalid.
std::string RichFile() {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddUint8("u8", 1);
  w.AddInt8("i8", -1);
  w.AddUint16("u16", 2);
  w.AddInt16("i16", -2);
  w.AddUint32("u32", 3);
  w.AddInt32("i32", -3);
  w.AddUint64("u64", 4);
  w.AddInt64("i64", -4);
  w.AddFloat32("f32", 0.5f);
  w.AddFloat64("f64", 0.25);
  w.AddBool("bool", true);
  w.AddStringArray("tokens", {"<s>", "hi", ""});
  w.Add("nested", ArrayOf(GgufValueType::kArray, {ArrayOf(GgufValueType::kUint8, {U8(9)}),
                                                  ArrayOf(GgufValueType::kUint8, {})}));
  EXPECT_TRUE(w.AddTensor("q8", DType::kQ8_0, {32}, std::string(34, '\x01')).ok());
  EXPECT_TRUE(w.AddTensorF32("f", {8}, std::vector<float>(8, 1.5f)).ok());
  return w.Build();
}

TEST(GgufFileSweepTest, RichFileIsValid) {
  const std::string bytes = RichFile();
  const auto file = Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->tensors().size(), 2u);
  const GgufTensorInfo& last = (*file)->tensors().back();
  EXPECT_EQ(last.offset_in_file + last.n_bytes, bytes.size());  // no trailing padding
}

TEST(GgufFileSweepTest, EveryProperPrefixIsRejected) {
  const std::string bytes = RichFile();
  for (size_t n = 0; n < bytes.size(); ++n) {
    const auto file = Parse(bytes.substr(0, n));
    ASSERT_FALSE(file.ok()) << "prefix of " << n << " bytes accepted";
    ASSERT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
    ASSERT_THAT(file.status().message(), HasSubstr("gguf: ")) << n;
  }
}

TEST(GgufFileSweepTest, CorruptingAnyByteNeverCrashes) {
  // Each byte set to a few hostile values: the parse either fails cleanly or succeeds, and a
  // success keeps every tensor inside the buffer.
  const std::string bytes = RichFile();
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t value : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
      std::string corrupt = bytes;
      corrupt[i] = static_cast<char>(value);
      const auto file = Parse(corrupt);
      if (!file.ok()) {
        ASSERT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
        continue;
      }
      for (const GgufTensorInfo& t : (*file)->tensors()) {
        ASSERT_LE(t.offset_in_file + t.n_bytes, corrupt.size());
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The real default model.

TEST(GgufFileModelTest, DefaultModel) {
  const std::string path = test_support::DefaultModelPath();
  ASSERT_TRUE(std::filesystem::exists(path))
      << "no default model at " << path << " (scripts/setup.sh fetches it)";
  const auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_THAT(f.GetString("general.architecture"), IsOkAndHolds("llama"));
  EXPECT_EQ(f.tensors().size(), 272u);
  std::map<std::string, int> counts;
  for (const GgufTensorInfo& t : f.tensors()) ++counts[std::string(kernels::DTypeName(t.dtype))];
  EXPECT_EQ(counts, (std::map<std::string, int>{{"q4_1", 210}, {"f32", 61}, {"q8_0", 1}}));

  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dtype, DType::kQ8_0);
  EXPECT_EQ(embd->dims, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(embd->n_bytes, 49152u * 18 * 34);

  auto tokens = f.GetArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ((*tokens)->values.size(), 49152u);

  // Every tensor lies inside the file; the first row of each dequantizes to finite values.
  for (const GgufTensorInfo& t : f.tensors()) {
    ASSERT_LE(t.offset_in_file + t.n_bytes, f.file_size()) << t.name;
    std::vector<float> row(t.row_length());
    kernels::DequantizeRow(t.dtype, t.data, row.data(), t.row_length());
    for (float x : row) ASSERT_TRUE(std::isfinite(x)) << t.name;
  }
}

// ---------------------------------------------------------------------------------------------
// The fuzzer's seed corpus (tests/fuzz/seeds/gguf_fuzz): small valid files written with
// GgufWriter. BATON_WRITE_FUZZ_SEEDS=1 rewrites them; every run checks they parse.

std::map<std::string, std::string> FuzzSeeds() {
  std::map<std::string, std::string> seeds;
  seeds["header_only.gguf"] = GgufWriter().Build();
  {
    GgufWriter w;
    w.AddString("general.architecture", "llama");
    w.AddUint8("u8", 200);
    w.AddInt8("i8", -100);
    w.AddUint16("u16", 60000);
    w.AddInt16("i16", -30000);
    w.AddUint32("u32", 4000000000u);
    w.AddInt32("i32", -2000000000);
    w.AddUint64("u64", 1ull << 40);
    w.AddInt64("i64", -(1ll << 40));
    w.AddFloat32("f32", 1e-5f);
    w.AddFloat64("f64", 3.141592653589793);
    w.AddBool("bool", true);
    w.AddStringArray("tokenizer.ggml.tokens", {"<s>", "</s>", "\xe2\x96\x81hi", "a"});
    w.AddFloat32Array("tokenizer.ggml.scores", {0, 0, -1.5f, -2});
    w.AddInt32Array("tokenizer.ggml.token_type", {3, 3, 1, 1});
    w.Add("nested", ArrayOf(GgufValueType::kArray,
                            {ArrayOf(GgufValueType::kUint8, {U8(1), U8(2)}),
                             ArrayOf(GgufValueType::kArray, {ArrayOf(GgufValueType::kString,
                                                                     {GgufValue::String("x")})})}));
    seeds["metadata_all_types.gguf"] = w.Build();
  }
  {
    // One small tensor of every dequantizable type, filled with a deterministic pattern.
    GgufWriter w;
    w.AddString("general.architecture", "llama");
    int i = 0;
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                        DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                        DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K}) {
      const kernels::DTypeTraits& t = kernels::Traits(dtype);
      const int64_t row = t.block_size == 1 ? 8 : t.block_size;
      std::string data(static_cast<size_t>(kernels::RowBytes(dtype, row)), '\0');
      for (size_t j = 0; j < data.size(); ++j) data[j] = static_cast<char>((j * 29 + i) & 0x3b);
      EXPECT_TRUE(
          w.AddTensor(absl::StrCat("t", i++, ".", std::string(t.name.data(), t.name.size())), dtype,
                      {row}, data)
              .ok());
    }
    seeds["tensors_every_dtype.gguf"] = w.Build();
  }
  {
    GgufWriter w(GgufWriter::Options{.version = 2, .alignment = 64});
    w.AddString("general.name", "v2");
    EXPECT_TRUE(w.AddTensorF32("a", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}).ok());
    EXPECT_TRUE(w.AddTensor("b", DType::kQ8_0, {32, 2}, std::string(68, '\x05')).ok());
    w.AddRawTensorInfo("a_alias", {8}, kF32Id, 0);
    seeds["v2_align64.gguf"] = w.Build();
  }
  return seeds;
}

TEST(GgufFuzzSeedsTest, SeedsParse) {
  const std::string dir = test_support::SourcePath("tests/fuzz/seeds/gguf_fuzz");
  const bool write = std::getenv("BATON_WRITE_FUZZ_SEEDS") != nullptr;
  if (write) std::filesystem::create_directories(dir);
  for (const auto& [name, bytes] : FuzzSeeds()) {
    SCOPED_TRACE(name);
    EXPECT_LT(bytes.size(), 10000u);
    EXPECT_TRUE(Parse(bytes).ok()) << Parse(bytes).status();
    const std::string path = dir + "/" + name;
    if (write) {
      std::ofstream(path, std::ios::binary) << bytes;
    }
    ASSERT_TRUE(std::filesystem::exists(path)) << "the committed seed is missing";
    const auto file = GgufFile::Open(path);
    EXPECT_TRUE(file.ok()) << file.status();
  }
}

}  // namespace
}  // namespace baton::engine
