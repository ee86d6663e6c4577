// LoadVocab: the tokenizer.ggml.* keys of real and synthetic GGUF files, defaults and errors.
#include "engine/vocab.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/gguf_file.h"
#include "engine/gguf_writer.h"
#include "engine/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace baton::engine {
namespace {

using ::testing::HasSubstr;

// llama.cpp's vocabulary-only GGUF files (tests/data/tokenizer-vectors/README.md).
std::string VectorsPath(const std::string& file) {
  return test_support::SourcePath("tests/data/tokenizer-vectors/" + file);
}

absl::StatusOr<Vocab> LoadFile(const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  return LoadVocab(**file);
}

absl::StatusOr<Vocab> LoadBytes(const GgufWriter& w) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(w.Build(), "test.gguf");
  if (!file.ok()) return file.status();
  return LoadVocab(**file);
}

// A tiny byte-level BPE vocabulary; `skip` names a key to leave out.
GgufWriter TinyGpt2(const std::string& skip = "") {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  if (skip != "model") w.AddString("tokenizer.ggml.model", "gpt2");
  if (skip != "pre") w.AddString("tokenizer.ggml.pre", "gpt-2");
  if (skip != "tokens")
    w.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "ab", "<|endoftext|>"});
  if (skip != "token_type") w.AddInt32Array("tokenizer.ggml.token_type", {1, 1, 1, 3});
  if (skip != "merges") w.AddStringArray("tokenizer.ggml.merges", {"a b"});
  return w;
}

TEST(LoadVocabTest, SmolLM2) {
  absl::StatusOr<Vocab> v = LoadFile(test_support::DefaultModelPath());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->model, TokenizerModel::kBytePairGpt2);
  EXPECT_EQ(v->pre, "smollm");
  EXPECT_EQ(v->size(), 49152);
  EXPECT_EQ(v->merges.size(), 48900u);
  EXPECT_EQ(v->token_types.size(), 49152u);
  EXPECT_TRUE(v->scores.empty());
  EXPECT_EQ(v->tokens[1], "<|im_start|>");
  EXPECT_EQ(v->token_types[1], TokenType::kControl);
  EXPECT_EQ(v->bos_id, 1);
  EXPECT_EQ(v->eos_id, 2);
  EXPECT_EQ(v->unk_id, 0);
  EXPECT_EQ(v->pad_id, 2);
  EXPECT_EQ(v->eot_id, 2);  // <|im_end|>, found by its text
  EXPECT_FALSE(v->add_bos);
  EXPECT_FALSE(v->add_eos);
  EXPECT_FALSE(v->add_space_prefix);
  EXPECT_THAT(v->chat_template, HasSubstr("<|im_start|>"));
}

TEST(LoadVocabTest, LlamaCppVectorFiles) {
  absl::StatusOr<Vocab> gpt2 = LoadFile(VectorsPath("ggml-vocab-gpt-2.gguf"));
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_EQ(gpt2->model, TokenizerModel::kBytePairGpt2);
  EXPECT_EQ(gpt2->pre, "gpt-2");
  EXPECT_EQ(gpt2->size(), 50257);
  EXPECT_EQ(gpt2->bos_id, 50256);
  EXPECT_EQ(gpt2->eos_id, 50256);
  EXPECT_EQ(gpt2->eot_id, 50256);
  EXPECT_FALSE(gpt2->add_bos);

  absl::StatusOr<Vocab> spm = LoadFile(VectorsPath("ggml-vocab-llama-spm.gguf"));
  ASSERT_TRUE(spm.ok()) << spm.status();
  EXPECT_EQ(spm->model, TokenizerModel::kSentencePiece);
  EXPECT_EQ(spm->size(), 32000);
  EXPECT_EQ(spm->scores.size(), 32000u);
  EXPECT_TRUE(spm->merges.empty());
  EXPECT_EQ(spm->bos_id, 1);
  EXPECT_EQ(spm->eos_id, 2);
  EXPECT_EQ(spm->unk_id, 0);
  EXPECT_EQ(spm->token_types[0], TokenType::kUnknown);
  EXPECT_EQ(spm->token_types[3], TokenType::kByte);
  EXPECT_TRUE(spm->add_bos);
  EXPECT_TRUE(spm->add_space_prefix);  // the SentencePiece default
}

TEST(LoadVocabTest, TinyGpt2Defaults) {
  absl::StatusOr<Vocab> v = LoadBytes(TinyGpt2());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->size(), 4);
  EXPECT_EQ(v->merges, std::vector<std::string>{"a b"});
  // llama.cpp's gpt2 defaults (11) are outside this vocabulary: no BOS/EOS.
  EXPECT_EQ(v->bos_id, kNoToken);
  EXPECT_EQ(v->eos_id, kNoToken);
  EXPECT_EQ(v->unk_id, kNoToken);
  EXPECT_EQ(v->eot_id, 3);  // <|endoftext|> by its text
  EXPECT_FALSE(v->add_bos);
  EXPECT_TRUE(v->chat_template.empty());
}

TEST(LoadVocabTest, Llama3PreAddsBosByDefault) {
  GgufWriter w = TinyGpt2("pre");
  w.AddString("tokenizer.ggml.pre", "llama-bpe");
  w.AddUint32("tokenizer.ggml.bos_token_id", 3);
  absl::StatusOr<Vocab> v = LoadBytes(w);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->add_bos);
  EXPECT_EQ(v->bos_id, 3);

  w.AddBool("tokenizer.ggml.add_bos_token", false);
  v = LoadBytes(w);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(v->add_bos);
}

TEST(LoadVocabTest, MissingPreMeansDefault) {
  absl::StatusOr<Vocab> v = LoadBytes(TinyGpt2("pre"));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->pre, "");
  EXPECT_TRUE(Tokenizer::Create(*v).ok());
}

TEST(LoadVocabTest, SpecialIdsAndFlags) {
  GgufWriter w = TinyGpt2();
  w.AddInt32("tokenizer.ggml.bos_token_id", 3);
  w.AddUint32("tokenizer.ggml.eos_token_id", 3);
  w.AddUint64("tokenizer.ggml.eot_token_id", 2);
  w.AddInt32("tokenizer.ggml.padding_token_id", -1);  // "none"
  w.AddBool("tokenizer.ggml.add_bos_token", true);
  w.AddBool("tokenizer.ggml.add_eos_token", true);
  w.AddString("tokenizer.chat_template", "{{ x }}");
  absl::StatusOr<Vocab> v = LoadBytes(w);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->bos_id, 3);
  EXPECT_EQ(v->eos_id, 3);
  EXPECT_EQ(v->eot_id, 2);  // the key wins over detection by text
  EXPECT_EQ(v->pad_id, kNoToken);
  EXPECT_TRUE(v->add_bos);
  EXPECT_TRUE(v->add_eos);
  EXPECT_EQ(v->chat_template, "{{ x }}");
}

TEST(LoadVocabTest, SentencePieceFlagsAndOddTypes) {
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "", "\xE2\x96\x81x"});
  w.AddFloat32Array("tokenizer.ggml.scores", {0, 0, 0, -1, -2});
  w.AddInt32Array("tokenizer.ggml.token_type", {2, 3, 3, 42, 1});
  w.AddBool("tokenizer.ggml.add_space_prefix", false);
  absl::StatusOr<Vocab> v = LoadBytes(w);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(v->add_space_prefix);
  EXPECT_TRUE(v->add_bos);
  EXPECT_EQ(v->bos_id, 1);
  EXPECT_EQ(v->unk_id, 0);
  EXPECT_EQ(v->tokens[3], "[EMPTY_3]");  // as llama.cpp
  EXPECT_EQ(v->token_types[3], TokenType::kUndefined);
  EXPECT_FLOAT_EQ(v->scores[4], -2.0f);
}

struct ErrorCase {
  std::string name;
  GgufWriter writer;
  std::string message;  // a substring of the error
};

TEST(LoadVocabTest, Errors) {
  std::vector<ErrorCase> cases;
  cases.push_back({"no model", TinyGpt2("model"), "tokenizer.ggml.model"});
  {
    GgufWriter w = TinyGpt2("model");
    w.AddString("tokenizer.ggml.model", "bert");
    cases.push_back({"unknown model", w, "unsupported tokenizer.ggml.model 'bert'"});
  }
  {
    GgufWriter w = TinyGpt2("model");
    w.AddUint32("tokenizer.ggml.model", 2);
    cases.push_back({"model not a string", w, "tokenizer.ggml.model has type uint32"});
  }
  {
    GgufWriter w = TinyGpt2("pre");
    w.AddString("tokenizer.ggml.pre", "mystery");
    cases.push_back({"unknown pre", w, "unknown pre-tokenizer 'mystery'"});
  }
  cases.push_back({"no tokens", TinyGpt2("tokens"), "no tokenizer.ggml.tokens"});
  {
    GgufWriter w = TinyGpt2("tokens");
    w.AddInt32Array("tokenizer.ggml.tokens", {1, 2, 3, 4});
    cases.push_back({"tokens not strings", w, "tokenizer.ggml.tokens is an array of int32"});
  }
  {
    GgufWriter w = TinyGpt2("tokens");
    w.AddStringArray("tokenizer.ggml.tokens", {});
    cases.push_back({"no token", w, "tokenizer.ggml.tokens is empty"});
  }
  {
    GgufWriter w = TinyGpt2("token_type");
    w.AddInt32Array("tokenizer.ggml.token_type", {1, 1, 1});
    cases.push_back({"types length", w, "tokenizer.ggml.token_type has 3 entries"});
  }
  {
    GgufWriter w = TinyGpt2();
    w.AddFloat32Array("tokenizer.ggml.scores", {0, 0, 0, 0, 0});
    cases.push_back({"scores length", w, "tokenizer.ggml.scores has 5 entries"});
  }
  {
    GgufWriter w = TinyGpt2();
    w.AddStringArray("tokenizer.ggml.scores", {"a", "b", "c", "d"});
    cases.push_back({"scores not numbers", w, "tokenizer.ggml.scores is an array of string"});
  }
  cases.push_back({"no merges", TinyGpt2("merges"), "no tokenizer.ggml.merges"});
  {
    GgufWriter w = TinyGpt2("merges");
    w.AddString("tokenizer.ggml.merges", "a b");
    cases.push_back({"merges not an array", w, "tokenizer.ggml.merges has type string"});
  }
  {
    GgufWriter w = TinyGpt2();
    w.AddUint32("tokenizer.ggml.bos_token_id", 4);
    cases.push_back({"bos out of range", w, "tokenizer.ggml.bos_token_id = 4 is out of range"});
  }
  {
    GgufWriter w = TinyGpt2();
    w.AddUint64("tokenizer.ggml.eos_token_id", uint64_t{1} << 40);
    cases.push_back({"eos out of range", w, "tokenizer.ggml.eos_token_id = 1099511627776"});
  }
  {
    GgufWriter w = TinyGpt2();
    w.AddFloat32("tokenizer.ggml.unknown_token_id", 1.0f);
    cases.push_back({"unk not an integer", w, "tokenizer.ggml.unknown_token_id has type float32"});
  }
  {
    GgufWriter w = TinyGpt2();
    w.AddString("tokenizer.ggml.add_bos_token", "yes");
    cases.push_back({"flag not a bool", w, "tokenizer.ggml.add_bos_token has type string"});
  }
  {
    GgufWriter w = TinyGpt2();
    w.AddBool("tokenizer.ggml.add_bos_token", true);
    cases.push_back({"add_bos without bos", w, "add_bos_token is true but there is no BOS"});
  }
  {
    GgufWriter w = TinyGpt2("tokens");
    w.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "a", "<|endoftext|>"});
    cases.push_back({"duplicate", w, "duplicate token 'a' at ids 0 and 2"});
  }
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<Vocab> v = LoadBytes(c.writer);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
    EXPECT_THAT(v.status().message(), HasSubstr(c.message));
    EXPECT_THAT(v.status().message(), HasSubstr("test.gguf"));
  }
}

TEST(TokenizerCreateTest, RejectsIncoherentVocab) {
  absl::StatusOr<Vocab> good = LoadBytes(TinyGpt2());
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_TRUE(Tokenizer::Create(*good).ok());

  Vocab v = *good;
  v.scores = {1.0f};
  EXPECT_THAT(Tokenizer::Create(v).status().message(), HasSubstr("tokenizer.ggml.scores has 1"));
  v = *good;
  v.eos_id = 99;
  EXPECT_THAT(Tokenizer::Create(v).status().message(), HasSubstr("eos_token_id = 99"));
  v = *good;
  v.pre = "nope";
  EXPECT_THAT(Tokenizer::Create(v).status().message(), HasSubstr("unknown pre-tokenizer 'nope'"));
  v = *good;
  v.tokens.push_back("");
  v.token_types.push_back(TokenType::kNormal);
  EXPECT_THAT(Tokenizer::Create(v).status().message(), HasSubstr("token 4 has empty text"));
  v = *good;
  v.tokens.clear();
  v.token_types.clear();
  EXPECT_THAT(Tokenizer::Create(v).status().message(), HasSubstr("no tokens"));
}

}  // namespace
}  // namespace baton::engine
