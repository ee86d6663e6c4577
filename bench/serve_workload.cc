#include "bench/serve_workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/latency_stats.h"
#include "nlohmann/json.hpp"

namespace baton::bench {

absl::StatusOr<std::vector<ServeRequest>> ParseJsonlDataset(absl::string_view text,
                                                            int32_t default_max_tokens) {
  std::vector<ServeRequest> requests;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    auto where = [&] { return absl::StrCat("dataset line ", line_number, ": "); };
    nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr,
                                             /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where(), "not a JSON object"));
    }
    auto prompt = j.find("prompt");
    if (prompt == j.end() || !prompt->is_string() || prompt->get_ref<const std::string&>().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "\"prompt\" must be a non-empty string"));
    }
    ServeRequest r{.prompt = prompt->get<std::string>(), .max_tokens = default_max_tokens};
    if (auto max_tokens = j.find("max_tokens"); max_tokens != j.end()) {
      if (!max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 1 ||
          max_tokens->get<int64_t>() > (1 << 20)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), "\"max_tokens\" must be an integer in [1, 1048576]"));
      }
      r.max_tokens = max_tokens->get<int32_t>();
    }
    requests.push_back(std::move(r));
  }
  if (requests.empty()) return absl::InvalidArgumentError("dataset: no requests in it");
  return requests;
}

absl::StatusOr<std::vector<ServeRequest>> LoadJsonlDataset(const std::string& path,
                                                           int32_t default_max_tokens) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open dataset ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  absl::StatusOr<std::vector<ServeRequest>> requests =
      ParseJsonlDataset(buffer.str(), default_max_tokens);
  if (!requests.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", requests.status().message()));
  }
  return requests;
}

std::vector<ServeRequest> SampleDataset(const std::vector<ServeRequest>& dataset, int32_t n,
                                        std::mt19937_64& rng) {
  std::vector<size_t> order(dataset.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t i = order.size(); i > 1; --i) {  // Fisher-Yates
    std::swap(order[i - 1], order[static_cast<size_t>(UniformInt(rng, 0, static_cast<int64_t>(i) - 1))]);
  }
  std::vector<ServeRequest> sample;
  if (dataset.empty()) return sample;
  for (int32_t i = 0; i < n; ++i) sample.push_back(dataset[order[i % order.size()]]);
  return sample;
}

const std::vector<std::string>& PromptWords() {
  static const std::vector<std::string> words = {
      "the",   "of",    "and",    "to",     "in",     "is",    "that",   "for",   "it",
      "as",    "was",   "with",   "be",     "by",     "on",    "not",    "he",    "this",
      "are",   "or",    "his",    "from",   "at",     "which", "but",    "have",  "an",
      "had",   "they",  "you",    "were",   "their",  "one",   "all",    "we",    "can",
      "her",   "has",   "there",  "been",   "if",     "more",  "when",   "will",  "would",
      "who",   "so",    "no",     "time",   "people", "water", "world",  "river", "light",
      "city",  "music", "house",  "number", "system", "small", "great",  "first", "day",
      "year",  "way",   "man",    "new",    "good",   "long",  "little", "old",   "right",
      "life",  "work",  "part",   "place",  "back",   "end",   "hand",   "high",  "home",
      "school", "state", "story", "family"};
  return words;
}

std::string WordsPrompt(int32_t n_words, std::mt19937_64& rng) {
  const std::vector<std::string>& words = PromptWords();
  std::string prompt;
  prompt.reserve(static_cast<size_t>(std::max(n_words, 0)) * 6);
  for (int32_t i = 0; i < n_words; ++i) {
    prompt += ' ';
    prompt += words[static_cast<size_t>(UniformInt(rng, 0, static_cast<int64_t>(words.size()) - 1))];
  }
  return prompt;
}

std::string CalibrationPrompt(int32_t times) {
  std::string prompt;
  for (int32_t t = 0; t < times; ++t) {
    for (const std::string& w : PromptWords()) absl::StrAppend(&prompt, " ", w);
  }
  return prompt;
}

absl::StatusOr<PromptCalibration> CalibrationFromProbes(int32_t tokens_once,
                                                        int32_t tokens_twice) {
  const int32_t per_list = tokens_twice - tokens_once;
  if (tokens_once <= 0 || per_list <= 0 || per_list > tokens_once) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt calibration: the word list once gave ", tokens_once, " tokens and twice ",
        tokens_twice, "; expected the second to be longer by at most the first"));
  }
  PromptCalibration c;
  c.tokens_per_word = static_cast<double>(per_list) / static_cast<double>(PromptWords().size());
  c.overhead_tokens = tokens_once - per_list;
  c.measured = true;
  return c;
}

int32_t WordsForTokens(int32_t target_tokens, const PromptCalibration& calibration) {
  const double words =
      (target_tokens - calibration.overhead_tokens) / std::max(calibration.tokens_per_word, 1e-6);
  return std::max<int32_t>(1, static_cast<int32_t>(std::lround(words)));
}

std::vector<ServeRequest> SyntheticRequests(int32_t n, int32_t input_len, int32_t output_len,
                                            double range_ratio,
                                            const PromptCalibration& calibration,
                                            std::mt19937_64& rng) {
  const std::vector<int32_t> inputs = UniformLengths(n, input_len, range_ratio, rng);
  const std::vector<int32_t> outputs = UniformLengths(n, output_len, range_ratio, rng);
  std::vector<ServeRequest> requests;
  requests.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    requests.push_back({.prompt = WordsPrompt(WordsForTokens(inputs[i], calibration), rng),
                        .max_tokens = outputs[i],
                        .target_prompt_tokens = inputs[i]});
  }
  return requests;
}

std::string ConversationPrompt(const std::string& history, const std::string& user) {
  return absl::StrCat(history, "\n\nUser:", user, "\n\nAssistant:");
}

std::string ConversationHistory(const std::string& prompt, const std::string& answer) {
  return absl::StrCat(prompt, answer);
}

std::vector<Conversation> SyntheticConversations(int32_t n, int32_t turns, int32_t system_tokens,
                                                 int32_t turn_tokens, int32_t output_len,
                                                 const PromptCalibration& calibration,
                                                 std::mt19937_64& rng) {
  const std::string system =
      absl::StrCat("System:", WordsPrompt(WordsForTokens(system_tokens, calibration), rng));
  std::vector<Conversation> conversations(std::max(0, n));
  for (Conversation& c : conversations) {
    c.system = system;
    c.max_tokens = output_len;
    for (int32_t t = 0; t < turns; ++t) {
      c.user_turns.push_back(WordsPrompt(WordsForTokens(turn_tokens, calibration), rng));
    }
  }
  return conversations;
}

}  // namespace baton::bench
