#include "engine/log_prob_file.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_format.h"

namespace baton::engine {
namespace {

constexpr char kMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
constexpr int64_t kHeaderBytes = sizeof(kMagic) + 3 * sizeof(int32_t);
constexpr float kLogProbRange = 16.0f;  // nats below the top that a row resolves
constexpr int32_t kMaxContext = 1 << 20;
constexpr int32_t kMaxVocab = 1 << 24;

int64_t ChunkBytes(const LogProbFileHeader& h) {
  return int64_t{ScoredPositions(h.n_ctx)} * LogProbRowWords(h.n_vocab) * sizeof(uint16_t);
}

int64_t FileBytes(const LogProbFileHeader& h) {
  return kHeaderBytes + int64_t{h.n_chunk} * h.n_ctx * sizeof(TokenId) + h.n_chunk * ChunkBytes(h);
}

absl::Status CheckShape(const LogProbFileHeader& h, const std::string& path) {
  if (h.n_ctx < 2 || h.n_ctx > kMaxContext || h.n_vocab < 1 || h.n_vocab > kMaxVocab ||
      h.n_chunk < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: n_ctx %d, n_vocab %d, n_chunk %d out of range (n_ctx 2..%d, n_vocab 1..%d, n_chunk "
        ">= 1)",
        path, h.n_ctx, h.n_vocab, h.n_chunk, kMaxContext, kMaxVocab));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t LogProbRowWords(int32_t n_vocab) { return 2 * ((int64_t{n_vocab} + 1) / 2) + 4; }

int32_t ScoredPositions(int32_t n_ctx) { return n_ctx - 1 - n_ctx / 2; }

double EncodeLogProbRow(const float* logits, int32_t n_vocab, TokenId target, uint16_t* row) {
  const auto [min_it, max_it] = std::minmax_element(logits, logits + n_vocab);
  const float max_logit = *max_it;
  const float min_logit = std::max(*min_it, max_logit - kLogProbRange);
  double sum_exp = 0;
  for (int32_t v = 0; v < n_vocab; ++v) sum_exp += std::exp(logits[v] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  const float scale = (max_logit - min_logit) / 65535.0f;
  std::memcpy(row, &scale, sizeof(float));
  std::memcpy(row + 2, &min_log_prob, sizeof(float));
  uint16_t* codes = row + 4;
  std::fill(codes, row + LogProbRowWords(n_vocab), uint16_t{0});
  if (scale != 0.0f) {
    const float inv_scale = 1.0f / scale;
    for (int32_t v = 0; v < n_vocab; ++v) {
      if (logits[v] > min_logit) {
        codes[v] = static_cast<uint16_t>(std::lrintf(inv_scale * (logits[v] - min_logit)));
      }
    }
  }
  return max_logit + log_sum_exp - logits[target];
}

LogProbFileWriter::LogProbFileWriter(std::string path, const LogProbFileHeader& header)
    : path_(std::move(path)),
      n_ctx_(header.n_ctx),
      n_vocab_(header.n_vocab),
      n_chunk_(header.n_chunk) {}

absl::StatusOr<std::unique_ptr<LogProbFileWriter>> LogProbFileWriter::Create(
    const std::string& path, const LogProbFileHeader& header) {
  if (absl::Status shape = CheckShape(header, path); !shape.ok()) return shape;
  if (header.tokens.size() != static_cast<size_t>(header.n_ctx) * header.n_chunk) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d tokens given for %d chunks of %d", path, header.tokens.size(),
                        header.n_chunk, header.n_ctx));
  }
  std::unique_ptr<LogProbFileWriter> writer(new LogProbFileWriter(path, header));
  writer->out_.open(path, std::ios::binary | std::ios::trunc);
  if (!writer->out_) {
    return absl::PermissionDeniedError(absl::StrFormat("cannot create '%s'", path));
  }
  const int32_t dims[3] = {header.n_ctx, header.n_vocab, header.n_chunk};
  writer->out_.write(kMagic, sizeof(kMagic));
  writer->out_.write(reinterpret_cast<const char*>(dims), sizeof(dims));
  writer->out_.write(reinterpret_cast<const char*>(header.tokens.data()),
                     static_cast<std::streamsize>(header.tokens.size() * sizeof(TokenId)));
  if (!writer->out_) return absl::DataLossError(absl::StrFormat("writing '%s' failed", path));
  return writer;
}

absl::Status LogProbFileWriter::WriteChunk(const std::vector<uint16_t>& rows) {
  const int64_t words = int64_t{ScoredPositions(n_ctx_)} * LogProbRowWords(n_vocab_);
  if (chunks_written_ >= n_chunk_ || static_cast<int64_t>(rows.size()) != words) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: chunk %d of %d with %d words (want %d)", path_, chunks_written_ + 1,
                        n_chunk_, rows.size(), words));
  }
  out_.write(reinterpret_cast<const char*>(rows.data()),
             static_cast<std::streamsize>(rows.size() * sizeof(uint16_t)));
  if (!out_) return absl::DataLossError(absl::StrFormat("writing '%s' failed", path_));
  ++chunks_written_;
  return absl::OkStatus();
}

absl::Status LogProbFileWriter::Close() {
  out_.close();
  if (!out_) return absl::DataLossError(absl::StrFormat("writing '%s' failed", path_));
  if (chunks_written_ != n_chunk_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: closed after %d of %d chunks", path_, chunks_written_, n_chunk_));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LogProbFileReader>> LogProbFileReader::Open(
    const std::string& path) {
  std::unique_ptr<LogProbFileReader> reader(new LogProbFileReader(path));
  reader->in_.open(path, std::ios::binary);
  if (!reader->in_) return absl::NotFoundError(absl::StrFormat("cannot read '%s'", path));
  char magic[sizeof(kMagic)];
  int32_t dims[3];
  reader->in_.read(magic, sizeof(magic));
  reader->in_.read(reinterpret_cast<char*>(dims), sizeof(dims));
  if (!reader->in_ || !std::equal(magic, magic + sizeof(magic), kMagic)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'%s' is not a log-probability file (no \"_logits_\" header; make one with "
        "--kl-divergence-base and --file)",
        path));
  }
  LogProbFileHeader& h = reader->header_;
  h.n_ctx = dims[0];
  h.n_vocab = dims[1];
  h.n_chunk = dims[2];
  if (absl::Status shape = CheckShape(h, path); !shape.ok()) return shape;
  std::error_code error;
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path, error));
  if (error || size != FileBytes(h)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d bytes, but %d chunks of %d tokens over a vocabulary of %d take %d (truncated or "
        "not llama.cpp's format)",
        path, size, h.n_chunk, h.n_ctx, h.n_vocab, FileBytes(h)));
  }
  h.tokens.resize(static_cast<size_t>(h.n_chunk) * h.n_ctx);
  reader->in_.read(reinterpret_cast<char*>(h.tokens.data()),
                   static_cast<std::streamsize>(h.tokens.size() * sizeof(TokenId)));
  if (!reader->in_) return absl::DataLossError(absl::StrFormat("reading '%s' failed", path));
  for (size_t i = 0; i < h.tokens.size(); ++i) {
    if (h.tokens[i] < 0 || h.tokens[i] >= h.n_vocab) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: token %d at index %d is outside the vocabulary of %d", path, h.tokens[i], i,
          h.n_vocab));
    }
  }
  return reader;
}

absl::Status LogProbFileReader::ReadChunk(std::vector<uint16_t>* rows) {
  if (chunks_read_ >= header_.n_chunk) {
    return absl::OutOfRangeError(absl::StrFormat("%s: all %d chunks read", path_,
                                                 header_.n_chunk));
  }
  rows->resize(ChunkBytes(header_) / sizeof(uint16_t));
  in_.read(reinterpret_cast<char*>(rows->data()), ChunkBytes(header_));
  if (!in_) {
    return absl::DataLossError(
        absl::StrFormat("%s: reading chunk %d failed", path_, chunks_read_ + 1));
  }
  ++chunks_read_;
  return absl::OkStatus();
}

}  // namespace baton::engine
