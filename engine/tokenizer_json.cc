#include "engine/tokenizer_json.h"

#include <algorithm>
#include <filesystem>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/json_file.h"
#include "engine/tokenizer_pre.h"
#include "nlohmann/json.hpp"

namespace baton::engine {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

// Errors name the file and the field: "DIR/tokenizer.json: model.type: ...".
class Where {
 public:
  explicit Where(std::string file) : file_(std::move(file)) {}
  absl::Status Error(const std::string& field, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": ", field, ": ", what));
  }

 private:
  std::string file_;
};

std::string TypeOf(const Json& j) { return j.is_object() ? j.value("type", std::string()) : ""; }

bool IsFalseOrAbsent(const Json& object, const char* key) {
  return !object.contains(key) || object[key].is_null() || object[key] == false;
}

// A Sequence of `key` (normalizers, pretokenizers, processors): whether `j` is one; if so, each
// part read by `read(part, "field.key[i]")` into *status.
template <typename Read>
bool ReadSequence(const Json& j, const char* key, const std::string& field, absl::Status* status,
                  Read read) {
  if (TypeOf(j) != "Sequence" || !j.value(key, Json()).is_array()) return false;
  *status = absl::OkStatus();
  for (size_t i = 0; i < j[key].size() && status->ok(); ++i) {
    *status = read(j[key][i], absl::StrCat(field, ".", key, "[", i, "]"));
  }
  return true;
}

absl::Status ReadNormalizer(const Json& j, const Where& w, const std::string& field,
                            TextPreparation* prep) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(j);
  absl::Status status;
  if (ReadSequence(j, "normalizers", field, &status, [&](const Json& part, const std::string& sub) {
        return ReadNormalizer(part, w, sub, prep);
      })) {
    return status;
  }
  if (type == "NFC") {
    prep->nfc = true;
    return absl::OkStatus();
  }
  if (type == "Replace" && j.contains("pattern") && j["pattern"].contains("String") &&
      j["pattern"]["String"].is_string() && j.value("content", Json()).is_string()) {
    const std::string from = j["pattern"]["String"];
    if (from.empty()) return w.Error(field, "Replace with an empty pattern");
    prep->replace.emplace_back(from, j["content"].get<std::string>());
    return absl::OkStatus();
  }
  if (type == "Prepend" && j.value("prepend", Json()).is_string()) {
    prep->prepend = j["prepend"];
    return absl::OkStatus();
  }
  return w.Error(field, absl::StrCat("normalizer '", j.dump(),
                                     "' is not supported (NFC, Replace "
                                     "with a string pattern, Prepend and Sequence are)"));
}

absl::StatusOr<SplitBehavior> BehaviorOf(const Json& j, const Where& w, const std::string& field) {
  const std::string behavior = j.value("behavior", std::string());
  if (behavior == "Isolated") return SplitBehavior::kIsolated;
  if (behavior == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (behavior == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  return w.Error(absl::StrCat(field, ".behavior"),
                 absl::StrCat("'", behavior,
                              "' is not supported (Isolated, MergedWithPrevious, "
                              "MergedWithNext are)"));
}

absl::Status ReadSplit(const Json& j, const Where& w, const std::string& field,
                       TextPreparation* prep) {
  if (!IsFalseOrAbsent(j, "invert")) return w.Error(field + ".invert", "true is not supported");
  absl::StatusOr<SplitBehavior> behavior = BehaviorOf(j, w, field);
  if (!behavior.ok()) return behavior.status();
  const Json pattern = j.value("pattern", Json());
  if (pattern.contains("String") && pattern["String"].is_string()) {
    const std::string literal = pattern["String"];
    if (literal.empty()) return w.Error(field + ".pattern", "empty string");
    prep->splits.push_back({PatternFromLiteral(literal), *behavior});
    return absl::OkStatus();
  }
  if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
    absl::StatusOr<std::string> regex =
        PatternFromOnigurumaRegex(pattern["Regex"].get<std::string>());
    if (!regex.ok()) return w.Error(field + ".pattern", regex.status().message());
    prep->splits.push_back({*std::move(regex), *behavior});
    return absl::OkStatus();
  }
  return w.Error(field + ".pattern", "neither a String nor a Regex");
}

// The GPT-2 regex that ByteLevel applies with use_regex (Hugging Face's spelling).
constexpr std::string_view kByteLevelRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

absl::Status ReadPreTokenizer(const Json& j, const Where& w, const std::string& field,
                              TextPreparation* prep) {
  if (j.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(j);
  absl::Status status;
  if (ReadSequence(j, "pretokenizers", field, &status,
                   [&](const Json& part, const std::string& sub) {
                     return ReadPreTokenizer(part, w, sub, prep);
                   })) {
    return status;
  }
  if (type == "Split") return ReadSplit(j, w, field, prep);
  if (type == "Digits") {
    const bool individual = j.value("individual_digits", false);
    prep->splits.push_back({individual ? R"(\p{N})" : R"(\p{N}+)", SplitBehavior::kIsolated});
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    if (!IsFalseOrAbsent(j, "add_prefix_space")) {
      return w.Error(field + ".add_prefix_space", "true is not supported");
    }
    if (j.value("use_regex", true)) {
      prep->splits.push_back(
          {*PatternFromOnigurumaRegex(kByteLevelRegex), SplitBehavior::kIsolated});
    }
    prep->byte_level = true;
    return absl::OkStatus();
  }
  return w.Error(field, absl::StrCat("pre-tokenizer type '", type,
                                     "' is not supported (Split, "
                                     "ByteLevel, Digits and Sequence are)"));
}

// "a b" or ["a", "b"] as "a b".
absl::StatusOr<std::string> MergeText(const Json& merge, const Where& w, size_t i) {
  const std::string field = absl::StrCat("model.merges[", i, "]");
  if (merge.is_string()) return merge.get<std::string>();
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    const std::string left = merge[0], right = merge[1];
    if (left.empty() || left.find(' ') != std::string::npos) {
      return w.Error(field, "a left half that is empty or holds a space is not supported");
    }
    return absl::StrCat(left, " ", right);
  }
  return w.Error(field, "neither \"a b\" nor [\"a\", \"b\"]");
}

absl::Status ReadModelOptions(const Json& model, const Where& w, TextPreparation* prep) {
  if (TypeOf(model) != "BPE") {
    return w.Error("model.type", absl::StrCat("'", TypeOf(model), "' is not supported (BPE is)"));
  }
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0) {
    return w.Error("model.dropout", "BPE dropout is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "") {
      return w.Error(absl::StrCat("model.", key), "only empty is supported");
    }
  }
  prep->byte_fallback = model.value("byte_fallback", false);
  prep->ignore_merges = model.value("ignore_merges", false);
  prep->fuse_unk = model.value("fuse_unk", false);
  return absl::OkStatus();
}

// Sets tokens[id] = text, growing `tokens`; INVALID_ARGUMENT when the id holds another text or is
// not below `limit` (the ids must be dense: no more than the entries that name them).
absl::Status PlaceToken(int64_t id, int64_t limit, const std::string& text, const Where& w,
                        const std::string& field, std::vector<std::string>* tokens) {
  if (id < 0 || id >= limit) {
    return w.Error(field, absl::StrCat("id ", id, " out of range (", limit, " tokens named)"));
  }
  if (static_cast<size_t>(id) >= tokens->size()) tokens->resize(id + 1);
  std::string& slot = (*tokens)[id];
  if (!slot.empty() && slot != text) {
    return w.Error(field, absl::StrCat("id ", id, " is both '", slot, "' and '", text, "'"));
  }
  slot = text;
  return absl::OkStatus();
}

absl::Status ReadModelVocab(const Json& model, int64_t limit, const Where& w, Vocab* vocab) {
  const Json& entries = model.value("vocab", Json());
  if (!entries.is_object() || entries.empty()) return w.Error("model.vocab", "missing or empty");
  for (const auto& [text, id] : entries.items()) {
    if (!id.is_number_integer()) return w.Error("model.vocab", absl::StrCat("'", text, "': no id"));
    if (absl::Status s =
            PlaceToken(id.get<int64_t>(), limit, text, w, "model.vocab", &vocab->tokens);
        !s.ok()) {
      return s;
    }
  }
  const Json& merges = model.value("merges", Json::array());
  if (!merges.is_array()) return w.Error("model.merges", "not an array");
  vocab->merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    absl::StatusOr<std::string> merge = MergeText(merges[i], w, i);
    if (!merge.ok()) return merge.status();
    vocab->merges.push_back(*std::move(merge));
  }
  return absl::OkStatus();
}

struct AddedToken {
  int64_t id;
  std::string content;
  bool special;
};

absl::StatusOr<std::vector<AddedToken>> ReadAddedTokens(const Json& root, const Where& w) {
  std::vector<AddedToken> added;
  const Json& list = root.value("added_tokens", Json::array());
  if (!list.is_array()) return w.Error("added_tokens", "not an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& t = list[i];
    const std::string field = absl::StrCat("added_tokens[", i, "]");
    if (!t.is_object() || !t.value("id", Json()).is_number_integer() ||
        !t.value("content", Json()).is_string() || t["content"].get<std::string>().empty()) {
      return w.Error(field, "needs an integer id and a non-empty content");
    }
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      if (!IsFalseOrAbsent(t, key)) {
        return w.Error(absl::StrCat(field, ".", key), "true is not supported");
      }
    }
    added.push_back({t["id"].get<int64_t>(), t["content"], t.value("special", false)});
  }
  return added;
}

TokenId FindToken(const Vocab& vocab, const std::string& text) {
  const auto it = std::find(vocab.tokens.begin(), vocab.tokens.end(), text);
  return it == vocab.tokens.end() ? kNoToken : static_cast<TokenId>(it - vocab.tokens.begin());
}

// The vocabulary: model tokens, added tokens, token types, the unknown token.
absl::Status ReadTokens(const Json& root, const Where& w, Vocab* vocab) {
  const Json& model = root["model"];
  absl::StatusOr<std::vector<AddedToken>> added = ReadAddedTokens(root, w);
  if (!added.ok()) return added.status();
  const int64_t limit = static_cast<int64_t>(model.value("vocab", Json()).size() + added->size());
  if (absl::Status s = ReadModelVocab(model, limit, w, vocab); !s.ok()) return s;
  for (const AddedToken& t : *added) {
    if (absl::Status s = PlaceToken(t.id, limit, t.content, w, "added_tokens", &vocab->tokens);
        !s.ok()) {
      return s;
    }
  }
  for (size_t id = 0; id < vocab->tokens.size(); ++id) {
    if (vocab->tokens[id].empty())
      return w.Error("model.vocab", absl::StrCat("no token has id ", id));
  }
  vocab->token_types.assign(vocab->tokens.size(), TokenType::kNormal);
  if (vocab->preparation->byte_fallback) {
    for (size_t id = 0; id < vocab->tokens.size(); ++id) {
      const std::string& text = vocab->tokens[id];
      if (text.size() == 6 && text.rfind("<0x", 0) == 0 && text[5] == '>') {
        vocab->token_types[id] = TokenType::kByte;
      }
    }
  }
  for (const AddedToken& t : *added) {
    vocab->token_types[t.id] = t.special ? TokenType::kControl : TokenType::kUserDefined;
  }
  if (const Json& unk = model.value("unk_token", Json()); unk.is_string()) {
    vocab->unk_id = FindToken(*vocab, unk.get<std::string>());
    if (vocab->unk_id == kNoToken) return w.Error("model.unk_token", "not in the vocabulary");
    vocab->token_types[vocab->unk_id] = TokenType::kUnknown;
  }
  return absl::OkStatus();
}

// TemplateProcessing's "single": a special token before the sequence is a BOS, one after an EOS.
absl::Status ReadPostProcessor(const Json& j, const Where& w, const std::string& field,
                               Vocab* vocab) {
  const std::string type = TypeOf(j);
  if (j.is_null() || type == "ByteLevel") return absl::OkStatus();
  absl::Status status;
  if (ReadSequence(j, "processors", field, &status, [&](const Json& part, const std::string& sub) {
        return ReadPostProcessor(part, w, sub, vocab);
      })) {
    return status;
  }
  if (type != "TemplateProcessing" || !j.value("single", Json()).is_array()) {
    return w.Error(field, absl::StrCat("post-processor type '", type,
                                       "' is not supported "
                                       "(TemplateProcessing, ByteLevel and Sequence are)"));
  }
  bool after_sequence = false;
  for (const Json& piece : j["single"]) {
    if (piece.contains("Sequence")) {
      after_sequence = true;
      continue;
    }
    const std::string text = piece.value("SpecialToken", Json()).value("id", std::string());
    const TokenId id = FindToken(*vocab, text);
    if (id == kNoToken)
      return w.Error(field + ".single", absl::StrCat("unknown token '", text, "'"));
    if (after_sequence ? vocab->add_eos : vocab->add_bos) {
      return w.Error(field + ".single", "more than one special token on a side");
    }
    (after_sequence ? vocab->add_eos : vocab->add_bos) = true;
    (after_sequence ? vocab->eos_id : vocab->bos_id) = id;
  }
  return absl::OkStatus();
}

// A special token of tokenizer_config.json: a text or {"content": text}; "" when absent or null.
std::string ConfigTokenText(const Json& config, const char* key) {
  const Json& value = config.value(key, Json());
  if (value.is_string()) return value;
  if (value.is_object() && value.value("content", Json()).is_string()) return value["content"];
  return "";
}

absl::Status ReadTokenizerConfig(const fs::path& dir, Vocab* vocab) {
  const fs::path config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    absl::StatusOr<Json> config = ReadJsonObjectFile(config_path.string());
    if (!config.ok()) return config.status();
    const Where w(config_path.string());
    for (auto [key, id] : {std::pair<const char*, TokenId*>{"bos_token", &vocab->bos_id},
                           {"eos_token", &vocab->eos_id},
                           {"pad_token", &vocab->pad_id}}) {
      const std::string text = ConfigTokenText(*config, key);
      if (text.empty()) continue;
      *id = FindToken(*vocab, text);
      if (*id == kNoToken) return w.Error(key, absl::StrCat("'", text, "' is not a token"));
    }
    const Json& tmpl = config->value("chat_template", Json());
    if (tmpl.is_string()) vocab->chat_template = tmpl;
    if (tmpl.is_array()) {
      for (const Json& named : tmpl) {
        if (named.value("name", std::string()) == "default") {
          vocab->chat_template = named.value("template", std::string());
        }
      }
    }
  }
  const fs::path jinja_path = dir / "chat_template.jinja";
  if (fs::exists(jinja_path)) {
    absl::StatusOr<std::string> text = ReadWholeFile(jinja_path.string());
    if (!text.ok()) return text.status();
    vocab->chat_template = *std::move(text);
  }
  return absl::OkStatus();
}

// LoadTokenizerJson's work; nlohmann may throw where a field has an unexpected type.
absl::StatusOr<Vocab> ReadTokenizerJson(const fs::path& file) {
  absl::StatusOr<Json> root = ReadJsonObjectFile(file.string());
  if (!root.ok()) return root.status();
  const Where w(file.string());
  Vocab vocab;
  vocab.preparation.emplace();
  TextPreparation& prep = *vocab.preparation;
  if (!root->contains("model")) return w.Error("model", "missing");
  if (absl::Status s = ReadModelOptions((*root)["model"], w, &prep); !s.ok()) return s;
  if (absl::Status s = ReadNormalizer(root->value("normalizer", Json()), w, "normalizer", &prep);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReadPreTokenizer(root->value("pre_tokenizer", Json()), w, "pre_tokenizer", &prep);
      !s.ok()) {
    return s;
  }
  // A split regex PCRE2 rejects is the file's error, named here.
  if (absl::StatusOr<std::unique_ptr<PreTokenizer>> compiled = PreTokenizer::Create(prep.splits);
      !compiled.ok()) {
    return w.Error("pre_tokenizer", compiled.status().message());
  }
  vocab.model = prep.byte_level ? TokenizerModel::kBytePairGpt2 : TokenizerModel::kBytePairChars;
  if (absl::Status s = ReadTokens(*root, w, &vocab); !s.ok()) return s;
  if (absl::Status s = ReadTokenizerConfig(file.parent_path(), &vocab); !s.ok()) return s;
  // What the post-processor adds is the BOS / EOS, whatever the config names.
  if (absl::Status s =
          ReadPostProcessor(root->value("post_processor", Json()), w, "post_processor", &vocab);
      !s.ok()) {
    return s;
  }
  return vocab;
}

}  // namespace

bool IsTokenizerJsonPath(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) || fs::path(path).extension() == ".json";
}

absl::StatusOr<Vocab> LoadTokenizerJson(const std::string& path) {
  std::error_code ec;
  const fs::path file =
      fs::is_directory(path, ec) ? fs::path(path) / "tokenizer.json" : fs::path(path);
  try {
    return ReadTokenizerJson(file);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.string(), ": a field of an unexpected type: ", e.what()));
  }
}

}  // namespace baton::engine
