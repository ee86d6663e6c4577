#include "engine/vocab_index.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer_pre.h"

namespace baton::engine {
namespace {

// Texts llama.cpp recognizes (llama-vocab.cpp, load()). End of turn, in the order we prefer them.
// clang-format off
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>",      "_<EOT>",     "[EOT]",   "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81"
                                           "sentence\xEF\xBD\x9C>",
    "<end_of_utterance>",
};

// End of generation.
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>", "[e~[",
};

// Fill-in-the-middle tokens: all become control tokens; pad, repo and file separator also end
// generation.
constexpr std::string_view kFimControlTexts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
    "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>",
    "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
    "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>",
};
constexpr std::string_view kFimEndOfGenerationTexts[] = {
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
    "<|file_sep|>",
};
// clang-format on

// Debian 12's Abseil has its own string_view type, which std::string_view does not convert to.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

uint32_t AttrFromType(TokenType type) {
  switch (type) {
    case TokenType::kUnknown:
      return kTokenAttrUnknown;
    case TokenType::kUnused:
      return kTokenAttrUnused;
    case TokenType::kNormal:
      return kTokenAttrNormal;
    case TokenType::kControl:
      return kTokenAttrControl;
    case TokenType::kUserDefined:
      return kTokenAttrUserDefined;
    case TokenType::kByte:
      return kTokenAttrByte;
    case TokenType::kUndefined:
      break;
  }
  return kTokenAttrUndefined;
}

std::string Quote(std::string_view text) {
  constexpr size_t kMax = 40;
  std::string q = absl::CHexEscape(Sv(text.substr(0, kMax)));
  return absl::StrCat("'", q, text.size() > kMax ? "...'" : "'");
}

absl::Status CheckSpecialId(std::string_view key, TokenId id, int32_t n) {
  if (id == kNoToken || (id >= 0 && id < n)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.", Sv(key), " = ", id,
                                                 " is out of range: the vocabulary has ", n,
                                                 " tokens"));
}

}  // namespace

absl::Status ValidateVocab(const Vocab& vocab) {
  const int32_t n = vocab.size();
  if (n == 0) {
    return absl::InvalidArgumentError("the vocabulary has no tokens (tokenizer.ggml.tokens)");
  }
  if (!vocab.scores.empty() && vocab.scores.size() != vocab.tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.scores has ",
                                                   vocab.scores.size(),
                                                   " entries but tokenizer.ggml.tokens has ", n));
  }
  if (!vocab.token_types.empty() && vocab.token_types.size() != vocab.tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.token_type has ",
                                                   vocab.token_types.size(),
                                                   " entries but tokenizer.ggml.tokens has ", n));
  }
  absl::flat_hash_map<std::string_view, TokenId, TextHash, TextEq> seen;
  seen.reserve(vocab.tokens.size());
  for (TokenId id = 0; id < n; ++id) {
    const std::string& text = vocab.tokens[id];
    if (text.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("token ", id, " has empty text"));
    }
    auto [it, inserted] = seen.emplace(text, id);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate token ", Quote(text), " at ids ", it->second, " and ", id));
    }
  }
  for (const auto& [key, id] : {std::pair<std::string_view, TokenId>{"bos_token_id", vocab.bos_id},
                                {"eos_token_id", vocab.eos_id},
                                {"eot_token_id", vocab.eot_id},
                                {"unknown_token_id", vocab.unk_id},
                                {"padding_token_id", vocab.pad_id}}) {
    if (absl::Status s = CheckSpecialId(key, id, n); !s.ok()) return s;
  }
  if (vocab.model == TokenizerModel::kBytePairGpt2 && !vocab.preparation.has_value()) {
    if (absl::StatusOr<PreTokenizerKind> kind = PreTokenizerKindFromName(vocab.pre); !kind.ok()) {
      return kind.status();
    }
  }
  if (vocab.add_bos && vocab.bos_id == kNoToken) {
    return absl::InvalidArgumentError(
        "tokenizer.ggml.add_bos_token is true but there is no BOS token "
        "(tokenizer.ggml.bos_token_id)");
  }
  if (vocab.add_eos && vocab.eos_id == kNoToken) {
    return absl::InvalidArgumentError(
        "tokenizer.ggml.add_eos_token is true but there is no EOS token "
        "(tokenizer.ggml.eos_token_id)");
  }
  return absl::OkStatus();
}

TokenId FindEndOfTurnByText(const Vocab& vocab) {
  for (std::string_view text : kEndOfTurnTexts) {
    for (TokenId id = 0; id < vocab.size(); ++id) {
      if (vocab.tokens[id] == text) return id;
    }
  }
  return kNoToken;
}

absl::StatusOr<VocabIndex> BuildVocabIndex(Vocab* vocab) {
  if (absl::Status s = ValidateVocab(*vocab); !s.ok()) return s;
  const int32_t n = vocab->size();
  if (vocab->token_types.empty()) vocab->token_types.assign(n, TokenType::kNormal);

  VocabIndex index;
  index.attrs.resize(n);
  index.text_to_id.reserve(n);
  for (TokenId id = 0; id < n; ++id) {
    index.attrs[id] = AttrFromType(vocab->token_types[id]);
    index.text_to_id.emplace(vocab->tokens[id], id);
  }
  auto find = [&](std::string_view text) {
    auto it = index.text_to_id.find(text);
    return it == index.text_to_id.end() ? kNoToken : it->second;
  };
  // A tokenizer.json says which added tokens are special; llama.cpp's retyping is for GGUF files.
  const bool retype = !vocab->preparation.has_value();
  auto make_control = [&](TokenId id) {
    if (retype && (index.attrs[id] & kTokenAttrControl) == 0) {
      index.attrs[id] |= kTokenAttrControl;
      vocab->token_types[id] = TokenType::kControl;
    }
  };

  if (vocab->eot_id == kNoToken) {
    for (std::string_view text : kEndOfTurnTexts) {
      if (TokenId id = find(text); id != kNoToken) {
        vocab->eot_id = id;
        break;
      }
    }
  }
  for (std::string_view text : kEndOfTurnTexts) {
    if (TokenId id = find(text); id != kNoToken) make_control(id);
  }
  for (std::string_view text : kFimControlTexts) {
    if (TokenId id = find(text); id != kNoToken) make_control(id);
  }
  for (std::string_view text : kFimEndOfGenerationTexts) {
    if (TokenId id = find(text); id != kNoToken) {
      make_control(id);
      index.eog_ids.push_back(id);
    }
  }
  for (std::string_view text : kEndOfGenerationTexts) {
    if (TokenId id = find(text); id != kNoToken) {
      make_control(id);
      index.eog_ids.push_back(id);
    }
  }
  if (vocab->eos_id != kNoToken) index.eog_ids.push_back(vocab->eos_id);
  if (vocab->eot_id != kNoToken) index.eog_ids.push_back(vocab->eot_id);
  std::sort(index.eog_ids.begin(), index.eog_ids.end());
  index.eog_ids.erase(std::unique(index.eog_ids.begin(), index.eog_ids.end()), index.eog_ids.end());

  for (TokenId id = 0; id < n; ++id) {
    if (index.attrs[id] & (kTokenAttrControl | kTokenAttrUserDefined | kTokenAttrUnknown)) {
      index.special_tokens.push_back(id);
    }
  }
  std::stable_sort(
      index.special_tokens.begin(), index.special_tokens.end(),
      [&](TokenId a, TokenId b) { return vocab->tokens[a].size() > vocab->tokens[b].size(); });
  return index;
}

}  // namespace baton::engine
