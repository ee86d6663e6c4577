// The tokenizer against llama.cpp's own ids (its test vectors, the SmolLM2 corpus), and its
// decoding, streaming detokenization, special tokens and pre-tokenizer splits.
#include "engine/tokenizer.h"

#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/gguf_file.h"
#include "engine/gguf_writer.h"
#include "engine/tokenizer_pre.h"
#include "engine/unicode.h"
#include "engine/vocab.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace baton::engine {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Not;

// llama.cpp's vocabulary-only GGUF files and the ids it gives for them
// (tests/data/tokenizer-vectors/README.md).
std::string VectorsPath(const std::string& file) {
  return test_support::SourcePath("tests/data/tokenizer-vectors/" + file);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The tokenizer of the GGUF file at `path`; every error names the file.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<Vocab> vocab = LoadVocab(**file);
  if (!vocab.ok()) return vocab.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Create(*std::move(vocab));
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(path, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

// The default model's tokenizer and llama.cpp's SentencePiece vocabulary, each loaded once (the
// SmolLM2 vocabulary takes a moment). Not ok, naming the file, when it cannot be loaded: callers
// ASSERT ok() before using the tokenizer.
const absl::StatusOr<std::unique_ptr<Tokenizer>>& SmolLM2() {
  static const auto* const tokenizer = new absl::StatusOr<std::unique_ptr<Tokenizer>>(
      LoadTokenizer(test_support::DefaultModelPath()));
  return *tokenizer;
}

const absl::StatusOr<std::unique_ptr<Tokenizer>>& LlamaSpm() {
  static const auto* const tokenizer = new absl::StatusOr<std::unique_ptr<Tokenizer>>(
      LoadTokenizer(VectorsPath("ggml-vocab-llama-spm.gguf")));
  return *tokenizer;
}

std::string Escaped(std::string_view s) {
  return absl::CHexEscape(absl::string_view(s.data(), s.size()));
}

std::string Ids(const std::vector<TokenId>& ids) {
  std::string out;
  for (TokenId id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
  return out;
}

TokenId IdOf(const Tokenizer& t, std::string_view text) {
  const std::vector<std::string>& tokens = t.vocab().tokens;
  for (TokenId id = 0; id < t.vocab().size(); ++id) {
    if (tokens[id] == text) return id;
  }
  ADD_FAILURE() << "no token " << Escaped(text);
  return kNoToken;
}

// The byte-level token of one byte (SmolLM2 has all 256).
TokenId ByteToken(const Tokenizer& t, uint8_t byte) {
  return IdOf(t, unicode::ByteToUnicode(byte));
}

// ---------------------------------------------------------------------------------------------
// llama.cpp's test vectors (test-tokenizer-0 format).

struct VectorCase {
  std::string text;
  std::vector<TokenId> ids;
};

std::vector<VectorCase> ReadVectors(const std::string& base) {
  constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  const std::string inp = ReadFile(base + ".inp");
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t sep = inp.find(kSeparator, pos);
    if (sep == std::string::npos) break;
    texts.push_back(inp.substr(pos, sep - pos));
    pos = sep + kSeparator.size();
  }
  std::vector<std::string> lines = absl::StrSplit(ReadFile(base + ".out"), '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  EXPECT_EQ(texts.size(), lines.size()) << base;
  std::vector<VectorCase> cases;
  for (size_t i = 0; i < texts.size() && i < lines.size(); ++i) {
    VectorCase c{texts[i], {}};
    for (absl::string_view field : absl::StrSplit(lines[i], ' ', absl::SkipEmpty())) {
      int32_t id = 0;
      EXPECT_TRUE(absl::SimpleAtoi(field, &id)) << lines[i];
      c.ids.push_back(id);
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

class LlamaCppVectorsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaCppVectorsTest, MatchesLlamaCpp) {
  const std::string base = VectorsPath(GetParam());
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = LoadTokenizer(base);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Tokenizer& tokenizer = **loaded;
  const std::vector<VectorCase> cases = ReadVectors(base);
  ASSERT_FALSE(cases.empty()) << "no test cases in " << base << ".inp and .out";
  int passed = 0;
  for (const VectorCase& c : cases) {
    const std::vector<TokenId> ids = tokenizer.Encode(c.text, {});
    if (ids == c.ids) {
      ++passed;
    } else {
      ADD_FAILURE() << GetParam() << ": '" << Escaped(c.text) << "'\n  expected: " << Ids(c.ids)
                    << "\n  actual:   " << Ids(ids);
    }
    if (unicode::IsValidUtf8(c.text)) {
      EXPECT_EQ(tokenizer.Decode(ids), c.text) << Escaped(c.text);
    }
  }
  std::cout << "[ vectors  ] " << GetParam() << ": " << passed << "/" << cases.size()
            << " passed\n";
  RecordProperty("passed", passed);
  RecordProperty("total", static_cast<int>(cases.size()));
}

INSTANTIATE_TEST_SUITE_P(Files, LlamaCppVectorsTest,
                         ::testing::Values("ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "ggml-vocab-gpt-2.gguf" ? "Gpt2" : "LlamaSpm";
                         });

// ---------------------------------------------------------------------------------------------
// Corpora encoded by llama.cpp itself: one JSON object per line, {"hex", "ids", "ids_special",
// "ids_bos"} from tokenize(add_bos, special) = (false, false), (false, true), (true, false).

void CheckCorpus(const Tokenizer& t, const std::string& name) {
  const std::string path = test_support::SourcePath("tests/data/tokenizer/" + name);
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  // "add_bos = true" in llama.cpp adds BOS only when the model says so: the model default.
  const EncodeOptions model_default = {.add_bos = t.vocab().add_bos, .add_eos = t.vocab().add_eos};
  // SentencePiece decodes a literal U+2581 as a space: no round trip for such text.
  const bool spm = t.vocab().model == TokenizerModel::kSentencePiece;
  int lines = 0;
  int passed = 0;
  int aborted = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++lines;
    const nlohmann::json j = nlohmann::json::parse(line);
    const std::string text = absl::HexStringToBytes(j.at("hex").get<std::string>());
    if (j.at("ids").is_object()) {
      // llama.cpp aborted on this input (a sequence decoding above U+10FFFF): there is no
      // reference. baton replaces each such byte by U+FFFD; it must simply not fail.
      ++aborted;
      EXPECT_FALSE(t.Encode(text, {}).empty()) << "line " << lines;
      EXPECT_FALSE(t.Encode(text, {.parse_special = true}).empty()) << "line " << lines;
      continue;
    }
    const auto expected = j.at("ids").get<std::vector<TokenId>>();
    const auto expected_special = j.at("ids_special").get<std::vector<TokenId>>();
    const auto expected_bos = j.at("ids_bos").get<std::vector<TokenId>>();
    const std::vector<TokenId> ids = t.Encode(text, {});
    const std::vector<TokenId> ids_special = t.Encode(text, {.parse_special = true});
    const std::vector<TokenId> ids_bos = t.Encode(text, model_default);
    EXPECT_EQ(ids, expected) << name << " line " << lines << " '" << Escaped(text) << "'";
    EXPECT_EQ(ids_special, expected_special)
        << name << " line " << lines << " '" << Escaped(text) << "'";
    EXPECT_EQ(ids_bos, expected_bos) << name << " line " << lines << " '" << Escaped(text) << "'";
    if (ids == expected && ids_special == expected_special && ids_bos == expected_bos) ++passed;
    if (unicode::IsValidUtf8(text) && !(spm && text.find("\xE2\x96\x81") != std::string::npos)) {
      EXPECT_EQ(t.Decode(ids), text) << name << " line " << lines;
      EXPECT_EQ(t.Decode(ids_bos), text) << name << " line " << lines;
      if (!spm) {
        EXPECT_EQ(t.Decode(ids_special, /*render_special=*/true), text)
            << name << " line " << lines;
      }
    }
  }
  std::cout << "[ corpus   ] " << name << ": " << passed << "/" << lines - aborted
            << " lines passed";
  if (aborted > 0) std::cout << " (" << aborted << " more have no reference: llama.cpp aborted)";
  std::cout << "\n";
  EXPECT_GT(lines, 0);
}

TEST(CorpusTest, SmolLM2) {
  ASSERT_TRUE(SmolLM2().ok()) << SmolLM2().status();
  CheckCorpus(**SmolLM2(), "smollm2_corpus.jsonl");
}

TEST(CorpusTest, LlamaSpm) {
  ASSERT_TRUE(LlamaSpm().ok()) << LlamaSpm().status();
  CheckCorpus(**LlamaSpm(), "llama_spm_corpus.jsonl");
}

// ---------------------------------------------------------------------------------------------
// The other pre-tokenizers: the GPT-2 vocabulary re-labelled with each tokenizer.ggml.pre value,
// against llama.cpp's ids for the same re-labelled files (make_extra_tokenizer_refs.py).

// The vocabulary of llama.cpp's GPT-2 test vectors.
absl::StatusOr<Vocab> Gpt2TestVocab() {
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::Open(VectorsPath("ggml-vocab-gpt-2.gguf"));
  if (!file.ok()) return file.status();
  return LoadVocab(**file);
}

TEST(PreTokenizerVariantsTest, MatchesLlamaCpp) {
  absl::StatusOr<Vocab> gpt2 = Gpt2TestVocab();
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();

  const std::string path = test_support::SourcePath("tests/data/tokenizer/gpt2_pre_variants.jsonl");
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) records.push_back(nlohmann::json::parse(line));
  }
  ASSERT_FALSE(records.empty());

  for (const std::string pre : {"default", "llama-bpe", "qwen2", "starcoder"}) {
    Vocab vocab = *gpt2;
    vocab.pre = pre;
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(std::move(vocab));
    ASSERT_TRUE(t.ok()) << t.status();
    int passed = 0;
    for (const nlohmann::json& r : records) {
      const std::string text = absl::HexStringToBytes(r.at("hex").get<std::string>());
      const auto expected = r.at("ids").at(pre).get<std::vector<TokenId>>();
      auto expected_special = expected;
      if (r.contains("ids_special") && r["ids_special"].contains(pre)) {
        expected_special = r["ids_special"][pre].get<std::vector<TokenId>>();
      }
      const std::vector<TokenId> ids = (*t)->Encode(text, {});
      const std::vector<TokenId> ids_special = (*t)->Encode(text, {.parse_special = true});
      EXPECT_EQ(ids, expected) << pre << ": '" << Escaped(text) << "'";
      EXPECT_EQ(ids_special, expected_special) << pre << ": '" << Escaped(text) << "'";
      if (ids == expected && ids_special == expected_special) ++passed;
    }
    std::cout << "[ variants ] gpt-2 vocabulary as pre '" << pre << "': " << passed << "/"
              << records.size() << " inputs passed\n";
  }
}

// "gpt-4o" (gpt-oss, Llama 4) likewise, against llama.cpp's own llama-tokenize
// (make_gpt4o_refs.py; special tokens not parsed).
TEST(PreTokenizerVariantsTest, Gpt4oMatchesLlamaCpp) {
  absl::StatusOr<Vocab> vocab = Gpt2TestVocab();
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  vocab->pre = "gpt-4o";
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(*std::move(vocab));
  ASSERT_TRUE(t.ok()) << t.status();
  std::ifstream in(test_support::SourcePath("tests/data/tokenizer/gpt2_pre_gpt4o.jsonl"));
  ASSERT_TRUE(in.good());
  int records = 0, passed = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json r = nlohmann::json::parse(line);
    const std::string text = absl::HexStringToBytes(r.at("hex").get<std::string>());
    const auto expected = r.at("ids").get<std::vector<TokenId>>();
    const std::vector<TokenId> ids = (*t)->Encode(text, {});
    EXPECT_EQ(ids, expected) << "'" << Escaped(text) << "'";
    ++records;
    if (ids == expected) ++passed;
  }
  EXPECT_GT(records, 1000);
  std::cout << "[ variants ] gpt-2 vocabulary as pre 'gpt-4o': " << passed << "/" << records
            << " inputs passed\n";
}

// ---------------------------------------------------------------------------------------------
// Special tokens, options, invalid input.

TEST(TokenizerTest, SpecialTokensOnlyWithParseSpecial) {
  ASSERT_TRUE(SmolLM2().ok()) << SmolLM2().status();
  const Tokenizer& t = **SmolLM2();
  const std::string text = "<|im_start|>user\nHi there<|im_end|>\n";
  const std::vector<TokenId> special = t.Encode(text, {.parse_special = true});
  ASSERT_GE(special.size(), 4u);
  EXPECT_EQ(special.front(), 1);                     // <|im_start|>
  EXPECT_THAT(special, Contains(2));                 // <|im_end|>
  EXPECT_EQ(t.Decode(special), "user\nHi there\n");  // control tokens are not rendered...
  EXPECT_EQ(t.Decode(special, /*render_special=*/true), text);  // ...unless asked

  const std::vector<TokenId> plain = t.Encode(text, {});
  EXPECT_THAT(plain, Not(Contains(1)));
  EXPECT_THAT(plain, Not(Contains(2)));
  EXPECT_EQ(t.Decode(plain), text);
  EXPECT_GT(plain.size(), special.size());
}

TEST(TokenizerTest, BosAndEosOptions) {
  ASSERT_TRUE(SmolLM2().ok()) << SmolLM2().status();
  const Tokenizer& t = **SmolLM2();
  const std::vector<TokenId> plain = t.Encode("Hello", {});
  std::vector<TokenId> both = plain;
  both.insert(both.begin(), t.vocab().bos_id);
  both.push_back(t.vocab().eos_id);
  EXPECT_EQ(t.Encode("Hello", {.add_bos = true, .add_eos = true}), both);
  EXPECT_THAT(t.Encode("", {.add_bos = true}), ElementsAre(t.vocab().bos_id));
  EXPECT_TRUE(t.Encode("", {}).empty());
}

TEST(TokenizerTest, InvalidUtf8BecomesReplacementCharacter) {
  ASSERT_TRUE(SmolLM2().ok()) << SmolLM2().status();
  const Tokenizer& t = **SmolLM2();
  // As llama.cpp: each byte that does not start a sequence becomes U+FFFD, then encodes normally.
  EXPECT_EQ(t.Encode("a\xFF"
                     "b",
                     {}),
            t.Encode("a\xEF\xBF\xBD"
                     "b",
                     {}));
  EXPECT_EQ(t.Encode("\x80\x80", {}), t.Encode("\xEF\xBF\xBD\xEF\xBF\xBD", {}));
  EXPECT_EQ(t.Encode("x\xE2\x82", {}), t.Encode("x\xEF\xBF\xBD\xEF\xBF\xBD", {}));
  // A sequence beyond U+10FFFF is invalid byte by byte.
  EXPECT_EQ(t.Encode("\xF4\x90\x80\x80", {}),
            t.Encode("\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", {}));
  // llama.cpp's decoder accepts overlong forms and surrogates; none of this may crash.
  EXPECT_EQ(t.Encode("a\xC0\x80"
                     "b",
                     {}),
            t.Encode(std::string("a\0b", 3), {}));
  EXPECT_FALSE(t.Encode("\xED\xA0\x80 \xED\xBF\xBF!", {}).empty());
  ASSERT_TRUE(LlamaSpm().ok()) << LlamaSpm().status();
  EXPECT_FALSE((*LlamaSpm())->Encode("\xFF\xC3 \xE2\x82", {}).empty());
}

TEST(TokenizerTest, EndOfGeneration) {
  ASSERT_TRUE(SmolLM2().ok()) << SmolLM2().status();
  const Tokenizer& t = **SmolLM2();
  EXPECT_TRUE(t.IsEndOfGeneration(2));   // <|im_end|>: EOS and EOT
  EXPECT_TRUE(t.IsEndOfGeneration(0));   // <|endoftext|>
  EXPECT_FALSE(t.IsEndOfGeneration(1));  // <|im_start|>
  EXPECT_FALSE(t.IsEndOfGeneration(t.Encode("Hello", {})[0]));
  EXPECT_FALSE(t.IsEndOfGeneration(kNoToken));
  EXPECT_FALSE(t.IsEndOfGeneration(1 << 30));
  ASSERT_TRUE(LlamaSpm().ok()) << LlamaSpm().status();
  EXPECT_TRUE((*LlamaSpm())->IsEndOfGeneration(2));  // </s>
  EXPECT_FALSE((*LlamaSpm())->IsEndOfGeneration(1));
}

TEST(TokenizerTest, TokenToPiece) {
  ASSERT_TRUE(SmolLM2().ok()) << SmolLM2().status();
  const Tokenizer& t = **SmolLM2();
  EXPECT_EQ(t.TokenToPiece(1), "");
  EXPECT_EQ(t.TokenToPiece(1, /*render_special=*/true), "<|im_start|>");
  EXPECT_EQ(t.TokenToPiece(-1), "");
  EXPECT_EQ(t.TokenToPiece(t.vocab().size()), "");
  EXPECT_EQ(t.TokenToPiece(ByteToken(t, ' ')), " ");
  EXPECT_EQ(t.TokenToPiece(ByteToken(t, 0xE2)), "\xE2");  // a partial character

  ASSERT_TRUE(LlamaSpm().ok()) << LlamaSpm().status();
  const Tokenizer& spm = **LlamaSpm();
  EXPECT_EQ(spm.TokenToPiece(0), "");  // <unk> is special
  EXPECT_EQ(spm.TokenToPiece(0, true), "<unk>");
  EXPECT_EQ(spm.TokenToPiece(3 + 0x41), "A");  // <0x41>
  EXPECT_EQ(spm.TokenToPiece(IdOf(spm, "\xE2\x96\x81the")), " the");
}

TEST(TokenizerTest, SentencePieceSpacePrefixAndDecode) {
  ASSERT_TRUE(LlamaSpm().ok()) << LlamaSpm().status();
  const Tokenizer& t = **LlamaSpm();
  const std::vector<TokenId> ids = t.Encode("Hello world", {.add_bos = true});
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(t.vocab().tokens[ids[1]], "\xE2\x96\x81Hello");
  EXPECT_EQ(t.Decode(ids), "Hello world");
  EXPECT_EQ(t.Decode({ids.begin() + 1, ids.end()}), "Hello world");
  EXPECT_EQ(t.Decode(ids, /*render_special=*/true), "<s>Hello world");
  // After a special token the space prefix comes again, as in llama.cpp.
  const std::vector<TokenId> two = t.Encode("a</s>b", {.parse_special = true});
  EXPECT_EQ(two, (std::vector<TokenId>{IdOf(t,
                                            "\xE2\x96\x81"
                                            "a"),
                                       2,
                                       IdOf(t,
                                            "\xE2\x96\x81"
                                            "b")}));
  // Characters that are not tokens fall back to bytes and decode back.
  const std::string rare = "\xF0\x9F\xA6\x99 \xE4\xB8\x80";
  const std::vector<TokenId> rare_ids = t.Encode(rare, {});
  EXPECT_EQ(t.Decode(rare_ids), rare);
}

TEST(TokenizerTest, DecodeRoundTrip) {
  const std::vector<std::string> texts = {
      "Hello, world!",
      "  leading and trailing  ",
      "tabs\tand\nnewlines\r\n",
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x8E\x89 and CJK "
      "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C",
      "numbers 1234567890 3.14159",
      "code: for (int i = 0; i < n; ++i) { x[i] += 1; }",
      "<|im_start|> as plain text",
  };
  ASSERT_TRUE(SmolLM2().ok()) << SmolLM2().status();
  ASSERT_TRUE(LlamaSpm().ok()) << LlamaSpm().status();
  for (const Tokenizer* t : {SmolLM2()->get(), LlamaSpm()->get()}) {
    for (const std::string& text : texts) {
      EXPECT_EQ(t->Decode(t->Encode(text, {})), text);
    }
  }
}

TEST(TokenizerTest, LongInput) {
  ASSERT_TRUE(SmolLM2().ok()) << SmolLM2().status();
  const Tokenizer& t = **SmolLM2();
  std::string text;
  while (text.size() < 64 * 1024) {
    text += "The quick brown fox, \xE4\xBD\xA0\xE5\xA5\xBD, jumps over 1234 lazy dogs!\n\t";
  }
  text += std::string(10000, ' ') + std::string(10000, 'a');
  const std::vector<TokenId> ids = t.Encode(text, {});
  EXPECT_EQ(t.Decode(ids), text);
}

// ---------------------------------------------------------------------------------------------
// IncrementalDetokenizer.

// Feeds `ids` one by one; every chunk must be valid UTF-8. Returns the chunks, Flush() last.
std::vector<std::string> Stream(const Tokenizer& t, const std::vector<TokenId>& ids,
                                bool render_special = false) {
  IncrementalDetokenizer detokenizer(t, render_special);
  std::vector<std::string> chunks;
  for (TokenId id : ids) chunks.push_back(detokenizer.Add(id));
  chunks.push_back(detokenizer.Flush());
  for (const std::string& chunk : chunks) {
    EXPECT_TRUE(unicode::IsValidUtf8(chunk)) << Escaped(chunk);
  }
  return chunks;
}

std::string Joined(const std::vector<std::string>& chunks) {
  std::string out;
  for (const std::string& c : chunks) out += c;
  return out;
}

TEST(IncrementalDetokenizerTest, CharactersSplitAcrossTokens) {
  ASSERT_TRUE(SmolLM2().ok()) << SmolLM2().status();
  const Tokenizer& t = **SmolLM2();
  const std::string text =
      "Hi \xF0\x9F\x98\x80\xF0\x9F\x8E\x89 \xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C "
      "\xF0\x9F\xA6\x99\xF0\x9F\xA7\xAC ok";
  const std::vector<TokenId> ids = t.Encode(text, {});
  bool split = false;
  for (TokenId id : ids) split |= !unicode::IsValidUtf8(t.TokenToPiece(id));
  ASSERT_TRUE(split) << "expected some token to hold part of a character";
  const std::vector<std::string> chunks = Stream(t, ids);
  EXPECT_EQ(Joined(chunks), text);
  EXPECT_THAT(chunks, Contains(""));  // something was held back
}

TEST(IncrementalDetokenizerTest, HoldsBackThenCompletes) {
  ASSERT_TRUE(SmolLM2().ok()) << SmolLM2().status();
  const Tokenizer& t = **SmolLM2();
  IncrementalDetokenizer d(t);
  EXPECT_EQ(d.Add(ByteToken(t, 0xF0)), "");
  EXPECT_EQ(d.Add(ByteToken(t, 0x9F)), "");
  EXPECT_EQ(d.Add(ByteToken(t, 0x98)), "");
  EXPECT_EQ(d.Add(ByteToken(t, 0x80)), "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.Add(ByteToken(t, 'x')), "x");
  EXPECT_EQ(d.Flush(), "");
}

TEST(IncrementalDetokenizerTest, InvalidSequences) {
  ASSERT_TRUE(SmolLM2().ok()) << SmolLM2().status();
  const Tokenizer& t = **SmolLM2();
  const std::string fffd = "\xEF\xBF\xBD";
  // A byte that never starts a character is replaced at once.
  EXPECT_THAT(Stream(t, {ByteToken(t, 0x80), ByteToken(t, 'a')}), ElementsAre(fffd, "a", ""));
  // A lead byte followed by ASCII: replaced when the ASCII arrives.
  EXPECT_THAT(Stream(t, {ByteToken(t, 0xE2), ByteToken(t, 'a')}), ElementsAre("", fffd + "a", ""));
  // An incomplete tail at the end: one U+FFFD from Flush.
  EXPECT_THAT(Stream(t, {ByteToken(t, 'a'), ByteToken(t, 0xE2), ByteToken(t, 0x82)}),
              ElementsAre("a", "", "", fffd));
  // A surrogate (ED A0 80) is ill-formed: three replacements.
  EXPECT_EQ(Joined(Stream(t, {ByteToken(t, 0xED), ByteToken(t, 0xA0), ByteToken(t, 0x80)})),
            fffd + fffd + fffd);
  // Overlong: E0 80 is no prefix of a character.
  EXPECT_EQ(Joined(Stream(t, {ByteToken(t, 0xE0), ByteToken(t, 0x80)})), fffd + fffd);
}

TEST(IncrementalDetokenizerTest, SpecialTokens) {
  ASSERT_TRUE(SmolLM2().ok()) << SmolLM2().status();
  const Tokenizer& t = **SmolLM2();
  const std::string text = "<|im_start|>assistant\nSure!<|im_end|>";
  const std::vector<TokenId> ids = t.Encode(text, {.parse_special = true});
  EXPECT_EQ(Joined(Stream(t, ids)), "assistant\nSure!");
  EXPECT_EQ(Joined(Stream(t, ids, /*render_special=*/true)), text);
}

TEST(IncrementalDetokenizerTest, SentencePieceLeadingSpace) {
  ASSERT_TRUE(LlamaSpm().ok()) << LlamaSpm().status();
  const Tokenizer& t = **LlamaSpm();
  const std::string text = "Hello \xE4\xB8\x80 \xF0\x9F\xA6\x99 world";
  for (bool bos : {false, true}) {
    const std::vector<TokenId> ids = t.Encode(text, {.add_bos = bos});
    EXPECT_EQ(Joined(Stream(t, ids)), text);
    EXPECT_EQ(t.Decode(ids), text);
  }
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizer splits (llama.cpp semantics) and merges on a tiny vocabulary.

std::vector<std::string> Split(PreTokenizerKind kind, std::string_view text) {
  absl::StatusOr<std::unique_ptr<PreTokenizer>> pre = PreTokenizer::Create(kind);
  EXPECT_TRUE(pre.ok()) << pre.status();
  if (!pre.ok()) return {};
  std::vector<PreTokenizer::Range> ranges;
  (*pre)->Split(text, &ranges);
  std::vector<std::string> words;
  for (const auto& [begin, end] : ranges) words.emplace_back(text.substr(begin, end - begin));
  return words;
}

TEST(PreTokenizerTest, Gpt2) {
  EXPECT_THAT(Split(PreTokenizerKind::kGpt2, "Hello world's  123\n\n  x"),
              ElementsAre("Hello", " world", "'s", " ", " 123", "\n\n ", " x"));
  // Unicode whitespace is whitespace (U+3000, U+0085), as in llama.cpp's tables.
  EXPECT_THAT(Split(PreTokenizerKind::kGpt2,
                    "a\xE3\x80\x80\xE3\x80\x80"
                    "b"),
              ElementsAre("a", "\xE3\x80\x80", "\xE3\x80\x80", "b"));
  EXPECT_THAT(Split(PreTokenizerKind::kGpt2,
                    "a\xC2\x85\xC2\x85"
                    "b"),
              ElementsAre("a", "\xC2\x85", "\xC2\x85", "b"));
  EXPECT_THAT(Split(PreTokenizerKind::kGpt2, "x  "), ElementsAre("x", "  "));
  EXPECT_THAT(Split(PreTokenizerKind::kGpt2, "?!.. \xF0\x9F\x98\x80!"),
              ElementsAre("?!..", " \xF0\x9F\x98\x80!"));
  EXPECT_TRUE(Split(PreTokenizerKind::kGpt2, "").empty());
}

TEST(PreTokenizerTest, Llama3) {
  EXPECT_THAT(Split(PreTokenizerKind::kLlama3, "Hello world's  123\n\n  x"),
              ElementsAre("Hello", " world", "'s", " ", " ", "123", "\n\n", " ", " x"));
  EXPECT_THAT(Split(PreTokenizerKind::kLlama3, "1234567 I'LL"),
              ElementsAre("123", "456", "7", " I", "'LL"));
  EXPECT_THAT(Split(PreTokenizerKind::kLlama3, "x:\n\ny"), ElementsAre("x", ":\n\n", "y"));
}

TEST(PreTokenizerTest, Qwen2) {
  EXPECT_THAT(Split(PreTokenizerKind::kQwen2, "ab 1234"),
              ElementsAre("ab", " ", "1", "2", "3", "4"));
}

TEST(PreTokenizerTest, Gpt4oKeepsCasedRunsApart) {
  EXPECT_THAT(Split(PreTokenizerKind::kGpt4o, "HelloWorld's 1234567 x/\n\n  y"),
              ElementsAre("Hello", "World's", " ", "123", "456", "7", " x", "/\n\n", " ", " y"));
  EXPECT_THAT(Split(PreTokenizerKind::kGpt4o, "iPhone iPad"),
              ElementsAre("i", "Phone", " i", "Pad"));
}

TEST(PreTokenizerTest, StarCoder) {
  // Digits one by one first; the gpt-2 regex then works inside each piece.
  EXPECT_THAT(Split(PreTokenizerKind::kStarCoder, "abc 123 x1"),
              ElementsAre("abc", " ", "1", "2", "3", " x", "1"));
}

TEST(PreTokenizerTest, Default) {
  EXPECT_THAT(Split(PreTokenizerKind::kDefault, "Hello, world! 12345"),
              ElementsAre("Hello", ",", " world", "!", " ", "123", "45"));
}

TEST(PreTokenizerTest, Names) {
  const std::vector<std::pair<std::string, PreTokenizerKind>> known = {
      {"smollm", PreTokenizerKind::kStarCoder}, {"starcoder", PreTokenizerKind::kStarCoder},
      {"llama-bpe", PreTokenizerKind::kLlama3}, {"llama3", PreTokenizerKind::kLlama3},
      {"qwen2", PreTokenizerKind::kQwen2},      {"gpt-2", PreTokenizerKind::kGpt2},
      {"default", PreTokenizerKind::kDefault},  {"", PreTokenizerKind::kDefault},
  };
  for (const auto& [name, kind] : known) {
    absl::StatusOr<PreTokenizerKind> found = PreTokenizerKindFromName(name);
    ASSERT_TRUE(found.ok()) << "'" << name << "': " << found.status();
    EXPECT_EQ(*found, kind) << "'" << name << "'";
  }
  EXPECT_FALSE(PreTokenizerKindFromName("gpt2").ok());
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TinyBpe(const std::string& pre) {
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", pre);
  w.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "c", "ab", "bc", "abc", "\xC4\xA0", "<x>"});
  w.AddInt32Array("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 1, 1, 4});
  w.AddStringArray("tokenizer.ggml.merges", {"b c", "a b", "a bc"});
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(w.Build(), "tiny.gguf");
  if (!file.ok()) return file.status();
  absl::StatusOr<Vocab> vocab = LoadVocab(**file);
  if (!vocab.ok()) return vocab.status();
  return Tokenizer::Create(*std::move(vocab));
}

TEST(BytePairTest, MergesByRank) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tiny = TinyBpe("gpt-2");
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  const Tokenizer& t = **tiny;
  // "b c" (rank 0) before "a b" (rank 1); then "a bc" (rank 2).
  EXPECT_THAT(t.Encode("abc", {}), ElementsAre(5));
  EXPECT_THAT(t.Encode("ab", {}), ElementsAre(3));
  EXPECT_THAT(t.Encode("cab", {}), ElementsAre(2, 3));
  // A character that is no token (and whose bytes are none) is dropped, as in llama.cpp.
  EXPECT_THAT(t.Encode("abxc", {}), ElementsAre(3, 2));
  EXPECT_THAT(t.Encode("a b", {}), ElementsAre(0, 6, 1));  // " b": "Ġ" then "b"
  // User-defined tokens are split off even without parse_special (llama.cpp, Hugging Face).
  EXPECT_THAT(t.Encode("a<x>b", {}), ElementsAre(0, 7, 1));
  EXPECT_EQ(t.Decode({0, 7, 1}), "a<x>b");
}

TEST(BytePairTest, Llama3TakesWholeWords) {
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", "llama-bpe");
  w.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "c", "ab", "abc"});
  w.AddStringArray("tokenizer.ggml.merges", {"a b"});
  w.AddBool("tokenizer.ggml.add_bos_token", false);  // llama3's default is true, but no BOS here
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(w.Build(), "tiny.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<Vocab> vocab = LoadVocab(**file);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(std::move(*vocab));
  ASSERT_TRUE(t.ok()) << t.status();
  // "abc" is a token: taken whole although no merge makes it (ignore_merges).
  EXPECT_THAT((*t)->Encode("abc", {}), ElementsAre(4));
  EXPECT_THAT((*t)->Encode("abca", {}), ElementsAre(3, 2, 0));
}

}  // namespace
}  // namespace baton::engine
