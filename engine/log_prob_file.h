// llama.cpp's KL-divergence base file (`llama-perplexity --kl-divergence-base FILE`): the tokens of
// a scored text and, for every scored position, the log-probabilities a base model gave, so that
// another model (or another engine) can be scored against them later. Files written here are read
// by llama-perplexity and the other way round.
//
// Layout (little-endian, no padding):
//   "_logits_"                     8 bytes magic
//   n_ctx, n_vocab, n_chunk        int32 each; n_ctx >= 2, n_vocab >= 1, n_chunk >= 1
//   tokens                         int32 [n_chunk * n_ctx], chunk c = tokens[c*n_ctx, (c+1)*n_ctx)
//   per chunk, per scored position [ScoredPositions(n_ctx)] (the positions of ChunkedScoring in
//   perplexity.h), one row of LogProbRowWords(n_vocab) uint16:
//     words 0..1  f32 scale,  words 2..3  f32 min_log_prob
//     words 4..   code[v] for each token v; log p(v) = scale * code[v] + min_log_prob
// A row keeps log-probabilities within 16 nats of the top one (lower ones read as the floor,
// min_log_prob); the code step is scale <= 16 / 65535, so each stored log-probability is within
// scale / 2 (and 2.4e-4 nats) of the exact one.
//
// Thread-safety: a writer or reader is used by one thread at a time; EncodeLogProbRow is pure.
#ifndef BATON_ENGINE_LOG_PROB_FILE_H_
#define BATON_ENGINE_LOG_PROB_FILE_H_

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/vocab.h"

namespace baton::engine {

struct LogProbFileHeader {
  int32_t n_ctx = 0;
  int32_t n_vocab = 0;
  int32_t n_chunk = 0;
  std::vector<TokenId> tokens;  // [n_chunk * n_ctx]
};

// uint16 words per stored position: 4 for the two f32 and n_vocab codes rounded up to even.
int64_t LogProbRowWords(int32_t n_vocab);

// Scored positions per chunk of n_ctx tokens: those from n_ctx / 2 to n_ctx - 2, each scoring the
// token after it.
int32_t ScoredPositions(int32_t n_ctx);

// Writes one position's row (LogProbRowWords(n_vocab) words) from its logits [n_vocab]; returns the
// exact negative log-likelihood of `target`.
double EncodeLogProbRow(const float* logits, int32_t n_vocab, TokenId target, uint16_t* row);

// The log-probability of token v stored in `row`.
inline float StoredLogProb(const uint16_t* row, TokenId v) {
  float scale;
  float min_log_prob;
  std::memcpy(&scale, row, sizeof(float));
  std::memcpy(&min_log_prob, row + 2, sizeof(float));
  return scale * static_cast<float>(row[4 + v]) + min_log_prob;
}

class LogProbFileWriter {
 public:
  // Creates (truncates) `path` and writes the header.
  static absl::StatusOr<std::unique_ptr<LogProbFileWriter>> Create(const std::string& path,
                                                                   const LogProbFileHeader& header);

  // Appends one chunk's rows: ScoredPositions(n_ctx) * LogProbRowWords(n_vocab) words.
  absl::Status WriteChunk(const std::vector<uint16_t>& rows);

  // Flushes; fails if a write failed or fewer than n_chunk chunks were written.
  absl::Status Close();

 private:
  LogProbFileWriter(std::string path, const LogProbFileHeader& header);
  std::string path_;
  int32_t n_ctx_;
  int32_t n_vocab_;
  int32_t n_chunk_;
  int32_t chunks_written_ = 0;
  std::ofstream out_;
};

class LogProbFileReader {
 public:
  // Opens `path` and reads the header. The file's size must be exactly what the header implies,
  // and every token must be below n_vocab.
  static absl::StatusOr<std::unique_ptr<LogProbFileReader>> Open(const std::string& path);

  const LogProbFileHeader& header() const { return header_; }

  // Reads the next chunk's rows into `rows` (resized); OutOfRange after the last chunk.
  absl::Status ReadChunk(std::vector<uint16_t>* rows);

 private:
  explicit LogProbFileReader(std::string path) : path_(std::move(path)) {}
  std::string path_;
  LogProbFileHeader header_;
  int32_t chunks_read_ = 0;
  std::ifstream in_;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_LOG_PROB_FILE_H_
