#include "engine/vocab.h"

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/gguf_file.h"
#include "engine/gguf_value.h"
#include "engine/tokenizer_pre.h"
#include "engine/vocab_index.h"

namespace baton::engine {
namespace {

absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

class VocabReader {
 public:
  explicit VocabReader(const GgufFile& file) : file_(file) {}

  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer in ", file_.path(), ": ", message));
  }

  absl::Status WrongType(std::string_view key, const GgufValue& v,
                         std::string_view expected) const {
    return Error(absl::StrCat(Sv(key), " has type ", Sv(GgufValueTypeName(v.type())), ", expected ",
                              Sv(expected)));
  }

  // nullptr when absent.
  absl::StatusOr<const std::string*> OptionalString(std::string_view key) const {
    const GgufValue* v = file_.Find(key);
    if (v == nullptr) return nullptr;
    if (!v->is_string()) return WrongType(key, *v, "string");
    return &v->as_string();
  }

  // Leaves *out alone when absent.
  absl::Status OptionalBool(std::string_view key, bool* out) const {
    const GgufValue* v = file_.Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_bool()) return WrongType(key, *v, "bool");
    *out = v->as_bool();
    return absl::OkStatus();
  }

  // A token id: any integer type; negative means "none". Leaves *out alone when absent.
  absl::Status OptionalTokenId(std::string_view key, int32_t n_tokens, TokenId* out) const {
    const GgufValue* v = file_.Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (v->is_signed() && v->as_signed() < 0) {
      *out = kNoToken;
      return absl::OkStatus();
    }
    uint64_t id = 0;
    if (v->is_signed()) {
      id = static_cast<uint64_t>(v->as_signed());
    } else if (v->is_unsigned()) {
      id = v->as_unsigned();
    } else {
      return WrongType(key, *v, "an integer");
    }
    if (id >= static_cast<uint64_t>(n_tokens)) {
      return Error(absl::StrCat(Sv(key), " = ", id, " is out of range: the vocabulary has ",
                                n_tokens, " tokens"));
    }
    *out = static_cast<TokenId>(id);
    return absl::OkStatus();
  }

  // An array whose elements satisfy `ok_element`; nullptr when absent.
  template <typename Pred>
  absl::StatusOr<const GgufValue::Array*> OptionalArray(std::string_view key,
                                                        std::string_view expected,
                                                        Pred ok_element) const {
    const GgufValue* v = file_.Find(key);
    if (v == nullptr) return nullptr;
    if (!v->is_array()) return WrongType(key, *v, absl::StrCat("array of ", Sv(expected)));
    const GgufValue::Array& a = v->as_array();
    for (const GgufValue& e : a.values) {
      if (!ok_element(e)) {
        return Error(absl::StrCat(Sv(key), " is an array of ", Sv(GgufValueTypeName(e.type())),
                                  ", expected ", Sv(expected)));
      }
    }
    return &a;
  }

  absl::Status CheckLength(std::string_view key, const GgufValue::Array& a, size_t n) const {
    if (a.values.size() == n) return absl::OkStatus();
    return Error(absl::StrCat(Sv(key), " has ", a.values.size(),
                              " entries but tokenizer.ggml.tokens has ", n));
  }

 private:
  const GgufFile& file_;
};

bool IsString(const GgufValue& v) { return v.is_string(); }
bool IsNumber(const GgufValue& v) { return v.is_float() || v.is_signed() || v.is_unsigned(); }
bool IsInteger(const GgufValue& v) { return v.is_signed() || v.is_unsigned(); }

TokenType TokenTypeFromInt(int64_t t) {
  if (t >= static_cast<int64_t>(TokenType::kUndefined) &&
      t <= static_cast<int64_t>(TokenType::kByte)) {
    return static_cast<TokenType>(t);
  }
  return TokenType::kUndefined;  // as llama.cpp
}

}  // namespace

absl::StatusOr<Vocab> LoadVocab(const GgufFile& file) {
  VocabReader r(file);
  Vocab vocab;

  absl::StatusOr<const std::string*> model = r.OptionalString("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  if (*model == nullptr) return r.Error("no tokenizer.ggml.model key: the file has no tokenizer");
  if (**model == "gpt2") {
    vocab.model = TokenizerModel::kBytePairGpt2;
  } else if (**model == "llama") {
    vocab.model = TokenizerModel::kSentencePiece;
  } else {
    return r.Error(absl::StrCat("unsupported tokenizer.ggml.model '", **model,
                                "'; supported: gpt2 (byte-level BPE), llama (SentencePiece)"));
  }
  const bool gpt2 = vocab.model == TokenizerModel::kBytePairGpt2;

  absl::StatusOr<const std::string*> pre = r.OptionalString("tokenizer.ggml.pre");
  if (!pre.ok()) return pre.status();
  if (*pre != nullptr) vocab.pre = **pre;
  PreTokenizerKind pre_kind = PreTokenizerKind::kDefault;
  if (gpt2) {
    absl::StatusOr<PreTokenizerKind> kind = PreTokenizerKindFromName(vocab.pre);
    if (!kind.ok()) return r.Error(kind.status().message());
    pre_kind = *kind;
  }

  absl::StatusOr<const GgufValue::Array*> tokens =
      r.OptionalArray("tokenizer.ggml.tokens", "string", IsString);
  if (!tokens.ok()) return tokens.status();
  if (*tokens == nullptr) return r.Error("no tokenizer.ggml.tokens key");
  const size_t n = (*tokens)->values.size();
  if (n == 0) return r.Error("tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return r.Error("tokenizer.ggml.tokens is too long");
  vocab.tokens.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = (*tokens)->values[i].as_string();
    // llama.cpp renames empty tokens so that they can be looked up.
    vocab.tokens.push_back(text.empty() ? absl::StrCat("[EMPTY_", i, "]") : text);
  }

  absl::StatusOr<const GgufValue::Array*> scores =
      r.OptionalArray("tokenizer.ggml.scores", "numbers", IsNumber);
  if (!scores.ok()) return scores.status();
  if (*scores != nullptr) {
    if (absl::Status s = r.CheckLength("tokenizer.ggml.scores", **scores, n); !s.ok()) return s;
    vocab.scores.reserve(n);
    for (const GgufValue& v : (*scores)->values) {
      vocab.scores.push_back(v.is_float()    ? static_cast<float>(v.as_float())
                             : v.is_signed() ? static_cast<float>(v.as_signed())
                                             : static_cast<float>(v.as_unsigned()));
    }
  }

  absl::StatusOr<const GgufValue::Array*> types =
      r.OptionalArray("tokenizer.ggml.token_type", "integers", IsInteger);
  if (!types.ok()) return types.status();
  if (*types != nullptr) {
    if (absl::Status s = r.CheckLength("tokenizer.ggml.token_type", **types, n); !s.ok()) {
      return s;
    }
    vocab.token_types.reserve(n);
    for (const GgufValue& v : (*types)->values) {
      vocab.token_types.push_back(v.is_signed()
                                      ? TokenTypeFromInt(v.as_signed())
                                      : TokenTypeFromInt(static_cast<int64_t>(std::min<uint64_t>(
                                            v.as_unsigned(), static_cast<uint64_t>(INT64_MAX)))));
    }
  } else {
    vocab.token_types.assign(n, TokenType::kNormal);
  }

  if (gpt2) {
    absl::StatusOr<const GgufValue::Array*> merges =
        r.OptionalArray("tokenizer.ggml.merges", "string", IsString);
    if (!merges.ok()) return merges.status();
    if (*merges == nullptr) return r.Error("no tokenizer.ggml.merges key (needed by gpt2)");
    vocab.merges.reserve((*merges)->values.size());
    for (const GgufValue& v : (*merges)->values) vocab.merges.push_back(v.as_string());
  }

  // Defaults as llama.cpp; a default id outside the vocabulary means "none".
  const int32_t n_tokens = static_cast<int32_t>(n);
  auto default_id = [&](TokenId id) { return id < n_tokens ? id : kNoToken; };
  if (gpt2) {
    vocab.bos_id = default_id(11);
    vocab.eos_id = default_id(11);
    vocab.add_bos = pre_kind == PreTokenizerKind::kLlama3;
    vocab.add_space_prefix = false;
  } else {
    vocab.bos_id = default_id(1);
    vocab.eos_id = default_id(2);
    vocab.unk_id = default_id(0);
    vocab.add_bos = true;
    vocab.add_space_prefix = true;
  }
  for (const auto& [key, out] :
       {std::pair<std::string_view, TokenId*>{"tokenizer.ggml.bos_token_id", &vocab.bos_id},
        {"tokenizer.ggml.eos_token_id", &vocab.eos_id},
        {"tokenizer.ggml.eot_token_id", &vocab.eot_id},
        {"tokenizer.ggml.unknown_token_id", &vocab.unk_id},
        {"tokenizer.ggml.padding_token_id", &vocab.pad_id}}) {
    if (absl::Status s = r.OptionalTokenId(key, n_tokens, out); !s.ok()) return s;
  }
  for (const auto& [key, out] :
       {std::pair<std::string_view, bool*>{"tokenizer.ggml.add_bos_token", &vocab.add_bos},
        {"tokenizer.ggml.add_eos_token", &vocab.add_eos},
        {"tokenizer.ggml.add_space_prefix", &vocab.add_space_prefix}}) {
    if (absl::Status s = r.OptionalBool(key, out); !s.ok()) return s;
  }

  absl::StatusOr<const std::string*> chat_template = r.OptionalString("tokenizer.chat_template");
  if (!chat_template.ok()) return chat_template.status();
  if (*chat_template != nullptr) vocab.chat_template = **chat_template;

  if (vocab.eot_id == kNoToken) vocab.eot_id = FindEndOfTurnByText(vocab);

  if (absl::Status s = ValidateVocab(vocab); !s.ok()) return r.Error(s.message());
  return vocab;
}

}  // namespace baton::engine
