// Hugging Face tokenizers (tokenizer.json): ids against Hugging Face's own `tokenizers` library
// on a corpus of many scripts, code, emoji, whitespace runs and special tokens, for the tokenizers
// of SmolLM2, Qwen2.5, Qwen3 and Gemma 3 (tests/data/tokenizer/make_hf_tokenizer_refs.py); the
// SmolLM2 file against the GGUF it came from; split behaviors; and the errors of bad files.
#include "engine/tokenizer_json.h"

#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer.h"
#include "engine/tokenizer_pre.h"
#include "engine/unicode.h"
#include "engine/unicode_nfc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace baton::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string HfTokenizerDir(const std::string& name) {
  return absl::StrCat(BATON_BINARY_DIR, "/tests/data/hf_tokenizers/", name);
}

struct CorpusLine {
  std::string text;
  std::vector<TokenId> ids;             // special tokens recognized
  std::vector<TokenId> ids_no_special;  // special tokens' text tokenized as text
  std::vector<TokenId>
      ids_add_special;  // special tokens recognized, BOS/EOS added as the model says
};

std::vector<CorpusLine> ReadCorpus(const std::string& name) {
  std::ifstream in(test_support::SourcePath("tests/data/tokenizer/hf/" + name + ".jsonl"));
  std::vector<CorpusLine> lines;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    lines.push_back({absl::HexStringToBytes(j.at("hex").get<std::string>()),
                     j.at("ids").get<std::vector<TokenId>>(),
                     j.at("ids_no_special").get<std::vector<TokenId>>(),
                     j.at("ids_add_special").get<std::vector<TokenId>>()});
  }
  return lines;
}

class HfCorpusTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfCorpusTest, SameIdsAsHuggingFaceTokenizers) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(HfTokenizerDir(GetParam()));
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<CorpusLine> corpus = ReadCorpus(GetParam());
  ASSERT_GT(corpus.size(), 800u);
  const Vocab& vocab = (*t)->vocab();
  const EncodeOptions add_special = {
      .add_bos = vocab.add_bos, .add_eos = vocab.add_eos, .parse_special = true};
  int agree = 0;
  int round_trips = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const CorpusLine& c = corpus[i];
    const std::vector<TokenId> ids = (*t)->Encode(c.text, {.parse_special = true});
    const std::vector<TokenId> ids_no_special = (*t)->Encode(c.text, {});
    const std::vector<TokenId> ids_add_special = (*t)->Encode(c.text, add_special);
    const std::string where = absl::StrCat(GetParam(), " line ", i + 1, " '",
                                           absl::CHexEscape(c.text.substr(0, 60)), "'");
    EXPECT_EQ(ids, c.ids) << where;
    EXPECT_EQ(ids_no_special, c.ids_no_special) << where;
    EXPECT_EQ(ids_add_special, c.ids_add_special) << where;
    agree +=
        ids == c.ids && ids_no_special == c.ids_no_special && ids_add_special == c.ids_add_special;
    // Decoding gives the normalized text back (a literal U+2581 comes back as a space when the
    // model writes spaces that way).
    const bool metaspace = vocab.model == TokenizerModel::kBytePairChars;
    if (unicode::ToNfc(c.text) == c.text &&
        !(metaspace && c.text.find("\xE2\x96\x81") != std::string::npos)) {
      EXPECT_EQ((*t)->Decode(ids, /*render_special=*/true), c.text) << where;
      ++round_trips;
    }
  }
  std::cout << "[ corpus   ] " << GetParam() << ": " << agree << "/" << corpus.size()
            << " inputs give Hugging Face's ids (3 ways each); " << round_trips
            << " decoded back\n";
}

INSTANTIATE_TEST_SUITE_P(Models, HfCorpusTest,
                         ::testing::Values("smollm2", "qwen2.5", "qwen3", "gemma3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = std::isalnum(c) ? c : '_';
                           return name;
                         });

// transformers made smollm2's tokenizer.json from the default model's GGUF: both give the same
// ids on llama.cpp's SmolLM2 corpus (its valid UTF-8 inputs).
TEST(TokenizerJsonTest, SmolLM2MatchesItsGguf) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> json = Tokenizer::Load(HfTokenizerDir("smollm2"));
  absl::StatusOr<std::unique_ptr<Tokenizer>> gguf =
      Tokenizer::Load(test_support::DefaultModelPath());
  ASSERT_TRUE(json.ok()) << json.status();
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  EXPECT_EQ((*json)->vocab().size(), (*gguf)->vocab().size());
  int compared = 0;
  for (const CorpusLine& c : ReadCorpus("smollm2")) {
    for (bool special : {false, true}) {
      EXPECT_EQ((*json)->Encode(c.text, {.parse_special = special}),
                (*gguf)->Encode(c.text, {.parse_special = special}))
          << absl::CHexEscape(c.text);
    }
    ++compared;
  }
  EXPECT_GT(compared, 800);
}

TEST(TokenizerJsonTest, ReadsSpecialTokensAndTemplateSettings) {
  absl::StatusOr<Vocab> gemma = LoadTokenizerJson(HfTokenizerDir("gemma3"));
  ASSERT_TRUE(gemma.ok()) << gemma.status();
  EXPECT_EQ(gemma->model, TokenizerModel::kBytePairChars);
  EXPECT_EQ(gemma->tokens[gemma->bos_id], "<bos>");
  EXPECT_EQ(gemma->tokens[gemma->eos_id], "<eos>");
  EXPECT_TRUE(gemma->add_bos);
  EXPECT_FALSE(gemma->add_eos);
  EXPECT_TRUE(gemma->preparation->byte_fallback);

  absl::StatusOr<Vocab> qwen = LoadTokenizerJson(HfTokenizerDir("qwen3") + "/tokenizer.json");
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_EQ(qwen->model, TokenizerModel::kBytePairGpt2);
  EXPECT_TRUE(qwen->preparation->nfc);
  EXPECT_EQ(qwen->bos_id, kNoToken);
  EXPECT_EQ(qwen->tokens[qwen->eos_id], "<|im_end|>");
  EXPECT_FALSE(qwen->add_bos);
  // Not special in Qwen3's file: recognized in text even without parse_special.
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(*qwen);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Encode("<think>", {}), std::vector<TokenId>{151667});
  EXPECT_NE((*t)->Encode("<|im_end|>", {}), std::vector<TokenId>{151645});
  EXPECT_EQ((*t)->Encode("<|im_end|>", {.parse_special = true}), std::vector<TokenId>{151645});
  EXPECT_TRUE((*t)->IsEndOfGeneration(151645));
}

// Hugging Face's documented example of the split behaviors.
TEST(TokenizerJsonTest, SplitBehaviors) {
  auto words = [](SplitBehavior behavior) {
    auto pre = PreTokenizer::Create({{PatternFromLiteral("-"), behavior}});
    EXPECT_TRUE(pre.ok()) << pre.status();
    const std::string text = "the-final--countdown";
    std::vector<PreTokenizer::Range> ranges;
    (*pre)->Split(text, &ranges);
    std::vector<std::string> out;
    for (const auto& [b, e] : ranges) out.push_back(text.substr(b, e - b));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(words(SplitBehavior::kIsolated), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(words(SplitBehavior::kMergedWithPrevious), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(words(SplitBehavior::kMergedWithNext), (V{"the", "-final", "-", "-countdown"}));
}

TEST(TokenizerJsonTest, OnigurumaWhitespaceBecomesTheUnicodeSet) {
  absl::StatusOr<std::string> p = PatternFromOnigurumaRegex(R"(\s+(?!\S)|[^\s\p{L}]+|a\\s)");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(*p, Not(HasSubstr(R"(\s+)")));
  EXPECT_THAT(*p, Not(HasSubstr(R"(\S)")));
  EXPECT_THAT(*p, Not(HasSubstr(R"([^\s)")));
  EXPECT_THAT(*p, HasSubstr(R"(a\\s)"));  // an escaped backslash stays
  auto pre = PreTokenizer::Create({{*p, SplitBehavior::kIsolated}});
  ASSERT_TRUE(pre.ok()) << pre.status();
  EXPECT_THAT(PatternFromOnigurumaRegex(R"([^\S])").status().message(),
              HasSubstr("inside a character class"));
}

// A small tokenizer.json: byte-level BPE over "ab", with `edit` applied to it.
std::string WriteTokenizer(const std::string& name,
                           const std::function<void(nlohmann::json*)>& edit) {
  nlohmann::json j = {
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"added_tokens", nlohmann::json::array({{{"id", 3}, {"content", "<s>"}, {"special", true}}})},
      {"model",
       {{"type", "BPE"},
        {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}, {"<s>", 3}}},
        {"merges", nlohmann::json::array({nlohmann::json::array({"a", "b"})})}}}};
  edit(&j);
  return test_support::WriteTempFile(name, j.dump());
}

TEST(TokenizerJsonTest, SmallFileAndMergeFormats) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t =
      Tokenizer::Load(WriteTokenizer("ok.json", [](auto*) {}));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Encode("abab<s>a", {.parse_special = true}), (std::vector<TokenId>{2, 2, 3, 0}));
  t = Tokenizer::Load(
      WriteTokenizer("strings.json", [](nlohmann::json* j) { (*j)["model"]["merges"] = {"a b"}; }));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Encode("ab", {}), std::vector<TokenId>{2});
}

TEST(TokenizerJsonTest, ErrorsNameTheFileAndTheField) {
  struct Case {
    std::function<void(nlohmann::json*)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](nlohmann::json* j) { (*j)["model"]["type"] = "Unigram"; }, "model.type: 'Unigram'"},
      {[](nlohmann::json* j) {
         (*j)["normalizer"] = {{"type", "NFKC"}};
       },
       "normalizer: "},
      {[](nlohmann::json* j) {
         (*j)["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       "pre_tokenizer: pre-tokenizer type 'Metaspace'"},
      {[](nlohmann::json* j) {
         (*j)["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers",
              {{{"type", "Split"}, {"pattern", {{"Regex", "("}}}, {"behavior", "Removed"}}}}};
       },
       "pre_tokenizer.pretokenizers[0].behavior"},
      {[](nlohmann::json* j) {
         (*j)["pre_tokenizer"] = {
             {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
       },
       "pre_tokenizer: pre-tokenizer regex '(unclosed' does not compile"},
      {[](nlohmann::json* j) { (*j)["added_tokens"][0]["lstrip"] = true; },
       "added_tokens[0].lstrip"},
      {[](nlohmann::json* j) { (*j)["model"]["vocab"].erase("b"); }, "no token has id 1"},
      {[](nlohmann::json* j) { (*j)["model"]["merges"] = {42}; }, "model.merges[0]"},
      {[](nlohmann::json* j) { (*j)["model"]["unk_token"] = "<unk>"; }, "model.unk_token"},
      {[](nlohmann::json* j) { (*j)["added_tokens"][0]["content"] = "b"; }, "id 3 is both"},
      {[](nlohmann::json* j) { (*j)["model"]["vocab"]["b"] = 99; }, "id 99 out of range"},
      {[](nlohmann::json* j) { (*j)["model"]["byte_fallback"] = "yes"; },
       "a field of an unexpected type"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = WriteTokenizer(absl::StrCat("bad", i, ".json"), cases[i].edit);
    absl::StatusOr<Vocab> vocab = LoadTokenizerJson(path);
    ASSERT_FALSE(vocab.ok()) << i;
    EXPECT_EQ(vocab.status().code(), absl::StatusCode::kInvalidArgument) << vocab.status();
    EXPECT_THAT(vocab.status().message(), HasSubstr(path)) << i;
    EXPECT_THAT(vocab.status().message(), HasSubstr(cases[i].field)) << vocab.status();
  }
  EXPECT_THAT(LoadTokenizerJson(test_support::WriteTempFile("broken.json", "{\"model\": "))
                  .status()
                  .message(),
              HasSubstr("not valid JSON"));
  const absl::Status missing =
      LoadTokenizerJson(test_support::TempPath("no-such-dir.json")).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
}

}  // namespace
}  // namespace baton::engine
