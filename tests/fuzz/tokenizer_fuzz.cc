// libFuzzer target: arbitrary bytes through the tokenizer of the default model (SmolLM2, byte-level
// BPE), llama.cpp's SentencePiece vocabulary (tests/data/tokenizer-vectors), and two small Hugging
// Face tokenizer.json tokenizers: the tiny checkpoint's byte-level one with an NFC normalizer, and
// one over characters with byte fallback, a Replace normalizer and a merging split (kChars below;
// the real Qwen3 and Gemma 3 files take too long to load under the fuzzer's instrumentation).
// Encodes with and without special-token parsing, decodes, and streams through
// IncrementalDetokenizer. Aborts when an id is out of range, when a streamed chunk is not valid
// UTF-8, when streaming and Decode() disagree on valid output, or when valid UTF-8 plain text does
// not decode back to itself.
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/gguf_file.h"
#include "engine/tokenizer.h"
#include "engine/tokenizer_json.h"
#include "engine/unicode.h"
#include "engine/vocab.h"
#include "tests/support/test_paths.h"

namespace {

using baton::engine::EncodeOptions;
using baton::engine::IncrementalDetokenizer;
using baton::engine::TokenId;
using baton::engine::Tokenizer;
namespace unicode = baton::engine::unicode;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", what);
    std::abort();
  }
}

// The tokenizer of `path`; aborts, naming the file and why, when it cannot be loaded.
std::unique_ptr<Tokenizer> LoadOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(path);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: cannot load %s: %s\n", path.c_str(),
                 tokenizer.status().ToString().c_str());
    std::abort();
  }
  return *std::move(tokenizer);
}

// BPE over characters with byte fallback (Gemma's kind of tokenizer.json), small.
constexpr char kChars[] = R"({
  "normalizer": {"type": "Sequence", "normalizers": [
    {"type": "NFC"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
  "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "MergedWithNext",
                    "invert": false},
  "post_processor": {"type": "TemplateProcessing",
                     "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                {"Sequence": {"id": "A", "type_id": 0}}]},
  "added_tokens": [{"id": 4, "content": "<s>", "special": true},
                   {"id": 5, "content": "\n\n", "special": false}],
  "model": {"type": "BPE", "byte_fallback": true, "fuse_unk": true, "unk_token": "<unk>",
            "vocab": {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "<s>": 4, "\n\n": 5, "\u2581": 6,
                      "\u2581ab": 7, "<0x00>": 8, "<0x41>": 9, "<0xC3>": 10, "<0xA9>": 11},
            "merges": [["a", "b"], ["\u2581", "ab"]]}
})";

// A tokenizer.json tokenizer, with NFC added to its normalizer if `nfc`; aborts when it cannot be
// loaded.
std::unique_ptr<Tokenizer> LoadJsonOrDie(const std::string& path, bool nfc) {
  absl::StatusOr<baton::engine::Vocab> vocab = baton::engine::LoadTokenizerJson(path);
  if (vocab.ok()) vocab->preparation->nfc |= nfc;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      vocab.ok() ? Tokenizer::Create(*std::move(vocab)) : vocab.status();
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: cannot load %s: %s\n", path.c_str(),
                 tokenizer.status().ToString().c_str());
    std::abort();
  }
  return *std::move(tokenizer);
}

struct Tokenizers {
  std::unique_ptr<Tokenizer> smollm2;
  std::unique_ptr<Tokenizer> spm;
  std::unique_ptr<Tokenizer> byte_level_json;
  std::unique_ptr<Tokenizer> chars_json;
  // Bytes that have a byte-level token in smollm2 (some control bytes have none, and their
  // characters are dropped, as llama.cpp drops them).
  std::array<bool, 256> smollm2_has_byte{};
};

const Tokenizers& Get() {
  static const Tokenizers* const tokenizers = [] {
    auto* t = new Tokenizers();
    t->smollm2 = LoadOrDie(baton::test_support::DefaultModelPath());
    std::map<std::string, int> byte_of_text;
    for (int b = 0; b < 256; ++b) byte_of_text[unicode::ByteToUnicode(static_cast<uint8_t>(b))] = b;
    for (const std::string& token : t->smollm2->vocab().tokens) {
      if (auto it = byte_of_text.find(token); it != byte_of_text.end()) {
        t->smollm2_has_byte[it->second] = true;
      }
    }
    t->spm = LoadOrDie(
        baton::test_support::SourcePath("tests/data/tokenizer-vectors/ggml-vocab-llama-spm.gguf"));
    t->byte_level_json = LoadJsonOrDie(baton::test_support::SourcePath("tests/data/hf/tiny"),
                                       /*nfc=*/true);
    const std::string chars = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                              "/tokenizer_fuzz." + std::to_string(getpid()) + ".json";
    std::ofstream(chars) << kChars;
    t->chars_json = LoadJsonOrDie(chars, /*nfc=*/false);
    std::remove(chars.c_str());
    return t;
  }();
  return *tokenizers;
}

// Streams `ids`; every chunk must be valid UTF-8. Returns the whole text.
std::string Stream(const Tokenizer& t, const std::vector<TokenId>& ids, bool render_special) {
  IncrementalDetokenizer detokenizer(t, render_special);
  std::string out;
  for (TokenId id : ids) {
    const std::string chunk = detokenizer.Add(id);
    Check(unicode::IsValidUtf8(chunk), "IncrementalDetokenizer::Add returned invalid UTF-8");
    out += chunk;
  }
  const std::string tail = detokenizer.Flush();
  Check(unicode::IsValidUtf8(tail), "IncrementalDetokenizer::Flush returned invalid UTF-8");
  return out + tail;
}

void Exercise(const Tokenizer& t, std::string_view text, bool has_all_bytes,
              bool expect_round_trip) {
  const bool valid = unicode::IsValidUtf8(text);
  for (bool parse_special : {false, true}) {
    const std::vector<TokenId> ids = t.Encode(text, {.parse_special = parse_special});
    for (TokenId id : ids) Check(id >= 0 && id < t.vocab().size(), "id out of range");
    if (has_all_bytes) Check(text.empty() == ids.empty(), "no ids for non-empty text");
    const std::string decoded = t.Decode(ids, /*render_special=*/parse_special);
    const std::string streamed = Stream(t, ids, /*render_special=*/parse_special);
    if (unicode::IsValidUtf8(decoded)) Check(streamed == decoded, "stream differs from Decode");
    if (expect_round_trip && valid) Check(decoded == text, "valid UTF-8 does not round-trip");
  }
  const std::vector<TokenId> with_bos = t.Encode(text, {.add_bos = true, .add_eos = true});
  if (t.vocab().bos_id != baton::engine::kNoToken) {
    Check(!with_bos.empty() && with_bos.front() == t.vocab().bos_id, "BOS missing");
  }
}

}  // namespace

// The tokenizers load here, before the first input's time limit starts.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Get();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizers& t = Get();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // Byte-level BPE gives back valid UTF-8 text made of bytes it has tokens for (a byte without a
  // token is dropped, as in llama.cpp). SentencePiece has byte fallback for every byte but does not
  // round-trip ("▁" decodes as a space).
  bool all_bytes = true;
  for (char c : text) all_bytes &= t.smollm2_has_byte[static_cast<uint8_t>(c)];
  Exercise(*t.smollm2, text, /*has_all_bytes=*/all_bytes, /*expect_round_trip=*/all_bytes);
  Exercise(*t.spm, text, /*has_all_bytes=*/true, /*expect_round_trip=*/false);
  // tokenizer.json: invalid UTF-8 is replaced first, and NFC changes some text, so no round trip;
  // the characters tokenizer has a byte for few bytes (the unknown token stands for the others).
  Exercise(*t.byte_level_json, text, /*has_all_bytes=*/true, /*expect_round_trip=*/false);
  Exercise(*t.chars_json, text, /*has_all_bytes=*/true, /*expect_round_trip=*/false);
  return 0;
}
