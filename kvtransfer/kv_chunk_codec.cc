#include "kvtransfer/kv_chunk_codec.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kvtransfer/kv_wire.h"

namespace baton::kvtransfer {
namespace {

// Protobuf wire types and the field numbers of kv_transfer.proto.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;
constexpr uint32_t kMessageHeader = 1;
constexpr uint32_t kMessageChunk = 2;
constexpr uint32_t kChunkLayer = 1;
constexpr uint32_t kChunkFirstBlock = 2;
constexpr uint32_t kChunkNBlocks = 3;
constexpr uint32_t kChunkData = 4;
constexpr uint32_t kChunkXxh64 = 5;
constexpr uint32_t kChunkXxh3 = 6;
constexpr uint32_t kChunkLinkSequence = 7;

// ---- Encoding ----

constexpr uint64_t Tag(uint32_t field, uint32_t wire_type) { return (field << 3) | wire_type; }

void PutVarint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

// An int32 field as proto3 writes it: nothing when zero, negative values sign-extended.
void PutInt32Field(std::string& out, uint32_t field, int32_t value) {
  if (value == 0) return;
  PutVarint(out, Tag(field, kVarint));
  PutVarint(out, static_cast<uint64_t>(static_cast<int64_t>(value)));
}

grpc::Slice SliceOf(const std::string& bytes) { return grpc::Slice(bytes.data(), bytes.size()); }

// ---- Decoding ----

// Reads a message's bytes across the slices it arrived in.
class PieceReader {
 public:
  explicit PieceReader(const std::vector<grpc::Slice>& slices) : slices_(slices) {
    for (const grpc::Slice& s : slices) remaining_ += static_cast<int64_t>(s.size());
  }

  int64_t position() const { return position_; }
  int64_t remaining() const { return remaining_; }

  bool ReadByte(uint8_t* byte) {
    SkipEmptySlices();
    if (remaining_ == 0) return false;
    *byte = slices_[slice_].begin()[offset_];
    Advance(1);
    return true;
  }

  bool ReadVarint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t byte;
      if (!ReadByte(&byte)) return false;
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;  // more than 10 bytes
  }

  // The next `n` bytes as views into the slices (no copy).
  bool TakePieces(int64_t n, KvBytePieces* pieces) {
    if (n < 0 || n > remaining_) return false;
    while (n > 0) {
      SkipEmptySlices();
      const grpc::Slice& s = slices_[slice_];
      const int64_t take = std::min<int64_t>(n, static_cast<int64_t>(s.size() - offset_));
      pieces->emplace_back(s.begin() + offset_, static_cast<size_t>(take));
      Advance(take);
      n -= take;
    }
    return true;
  }

  bool CopyBytes(int64_t n, std::string* out) {
    KvBytePieces pieces;
    if (!TakePieces(n, &pieces)) return false;
    out->clear();
    out->reserve(static_cast<size_t>(n));
    for (std::span<const uint8_t> p : pieces) {
      out->append(reinterpret_cast<const char*>(p.data()), p.size());
    }
    return true;
  }

  bool Skip(int64_t n) {
    KvBytePieces pieces;
    return TakePieces(n, &pieces);
  }

 private:
  void SkipEmptySlices() {
    while (slice_ < slices_.size() && offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
  }
  void Advance(int64_t n) {
    offset_ += static_cast<size_t>(n);
    position_ += n;
    remaining_ -= n;
  }

  const std::vector<grpc::Slice>& slices_;
  size_t slice_ = 0;
  size_t offset_ = 0;
  int64_t position_ = 0;
  int64_t remaining_ = 0;
};

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed KV push message: ", what));
}

// Reads one field's tag; fails on field number 0 and on groups, which kv_transfer.proto has not.
absl::Status ReadTag(PieceReader& reader, uint32_t* field, uint32_t* wire_type) {
  uint64_t tag;
  if (!reader.ReadVarint(&tag)) return Malformed("truncated field tag");
  *field = static_cast<uint32_t>(tag >> 3);
  *wire_type = static_cast<uint32_t>(tag & 7);
  if (*field == 0 || (tag >> 3) > 0x1fffffff) return Malformed("field number out of range");
  if (*wire_type != kVarint && *wire_type != kFixed64 && *wire_type != kLengthDelimited &&
      *wire_type != kFixed32) {
    return Malformed(absl::StrCat("field ", *field, " has wire type ", *wire_type,
                                  " (groups and unknown types are not accepted)"));
  }
  return absl::OkStatus();
}

// A length-delimited field's length, checked against what the reader holds.
absl::Status ReadLength(PieceReader& reader, uint32_t field, int64_t* length) {
  uint64_t n;
  if (!reader.ReadVarint(&n)) return Malformed(absl::StrCat("truncated length of field ", field));
  if (n > static_cast<uint64_t>(reader.remaining())) {
    return Malformed(absl::StrCat("field ", field, " of ", n, " bytes runs past the end (",
                                  reader.remaining(), " left)"));
  }
  *length = static_cast<int64_t>(n);
  return absl::OkStatus();
}

absl::Status SkipField(PieceReader& reader, uint32_t field, uint32_t wire_type) {
  bool ok = true;
  if (wire_type == kVarint) {
    uint64_t ignored;
    ok = reader.ReadVarint(&ignored);
  } else if (wire_type == kFixed64) {
    ok = reader.Skip(8);
  } else if (wire_type == kFixed32) {
    ok = reader.Skip(4);
  } else {
    int64_t length;
    if (absl::Status s = ReadLength(reader, field, &length); !s.ok()) return s;
    ok = reader.Skip(length);
  }
  return ok ? absl::OkStatus() : Malformed(absl::StrCat("truncated field ", field));
}

// A varint field of the chunk; int32 fields keep the low 32 bits, as protobuf does.
absl::Status ReadVarintField(PieceReader& reader, uint32_t field, uint32_t wire_type,
                             uint64_t* value) {
  if (wire_type != kVarint) {
    return Malformed(absl::StrCat("chunk field ", field, " has wire type ", wire_type,
                                  ", expected a varint"));
  }
  if (!reader.ReadVarint(value)) return Malformed(absl::StrCat("truncated chunk field ", field));
  return absl::OkStatus();
}

// The KvChunk that occupies the reader's next `length` bytes.
absl::StatusOr<ReceivedChunk> ReadChunk(PieceReader& reader, int64_t length) {
  ReceivedChunk chunk;
  const int64_t end = reader.position() + length;
  while (reader.position() < end) {
    uint32_t field, wire_type;
    if (absl::Status s = ReadTag(reader, &field, &wire_type); !s.ok()) return s;
    uint64_t value = 0;
    absl::Status read;
    switch (field) {
      case kChunkLayer:
      case kChunkFirstBlock:
      case kChunkNBlocks:
      case kChunkXxh64:
      case kChunkXxh3:
      case kChunkLinkSequence:
        read = ReadVarintField(reader, field, wire_type, &value);
        if (field == kChunkLinkSequence) chunk.link_sequence = value;
        if (field == kChunkLayer) chunk.layer = static_cast<int32_t>(value);
        if (field == kChunkFirstBlock) chunk.first_block = static_cast<int32_t>(value);
        if (field == kChunkNBlocks) chunk.n_blocks = static_cast<int32_t>(value);
        if (field == kChunkXxh64 || field == kChunkXxh3) {  // a oneof: the last one wins
          chunk.checksum_kind = field == kChunkXxh3 ? ReceivedChunk::Checksum::kXxh3
                                                    : ReceivedChunk::Checksum::kXxh64;
          chunk.checksum = value;
        }
        break;
      case kChunkData: {
        if (wire_type != kLengthDelimited) return Malformed("chunk data is not length-delimited");
        int64_t n;
        read = ReadLength(reader, field, &n);
        if (read.ok()) {
          chunk.data.clear();  // the last occurrence wins, as in protobuf
          if (!reader.TakePieces(n, &chunk.data)) return Malformed("truncated chunk data");
          chunk.data_bytes = n;
        }
        break;
      }
      default:
        read = SkipField(reader, field, wire_type);
    }
    if (!read.ok()) return read;
    if (reader.position() > end) return Malformed("a chunk field runs past the chunk's end");
  }
  return chunk;
}

}  // namespace

grpc::ByteBuffer EncodeChunkMessage(int32_t layer, int32_t first_block,
                                    std::span<const uint8_t* const> blocks, size_t block_bytes,
                                    BlockLoans& loans) {
  const size_t data_bytes = blocks.size() * block_bytes;
  KvBytePieces runs;  // the blocks, neighbours in memory joined
  for (const uint8_t* block : blocks) {
    if (!runs.empty() && runs.back().data() + runs.back().size() == block) {
      runs.back() = {runs.back().data(), runs.back().size() + block_bytes};
    } else {
      runs.emplace_back(block, block_bytes);
    }
  }
  const uint64_t checksum = ChunkChecksum(runs);

  // The chunk's fields in field order, as protobuf writes them: [fields 1-3, data's tag and
  // length] [data] [field 6].
  std::string fields;
  PutInt32Field(fields, kChunkLayer, layer);
  PutInt32Field(fields, kChunkFirstBlock, first_block);
  PutInt32Field(fields, kChunkNBlocks, static_cast<int32_t>(blocks.size()));
  std::string suffix;  // a oneof member: written even when zero
  PutVarint(suffix, Tag(kChunkXxh3, kVarint));
  PutVarint(suffix, checksum);
  std::string data_prefix;
  if (data_bytes > 0) {
    PutVarint(data_prefix, Tag(kChunkData, kLengthDelimited));
    PutVarint(data_prefix, data_bytes);
  }
  const size_t chunk_bytes = fields.size() + data_prefix.size() + data_bytes + suffix.size();
  std::string prefix;
  PutVarint(prefix, Tag(kMessageChunk, kLengthDelimited));
  PutVarint(prefix, chunk_bytes);
  prefix += fields;
  prefix += data_prefix;

  std::vector<grpc::Slice> slices;
  slices.reserve(runs.size() + 2);
  slices.push_back(SliceOf(prefix));
  for (std::span<const uint8_t> run : runs) slices.push_back(loans.Lend(run));
  slices.push_back(SliceOf(suffix));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

grpc::ByteBuffer EncodeProtoMessage(const google::protobuf::MessageLite& message) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice = SliceOf(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

absl::Status DecodeProtoMessage(const grpc::ByteBuffer& buffer, const char* what,
                                google::protobuf::MessageLite* message) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return Malformed(absl::StrCat("unreadable ", what));
  PieceReader reader(slices);
  std::string bytes;
  reader.CopyBytes(reader.remaining(), &bytes);
  if (!message->ParseFromString(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed ", what));
  }
  return absl::OkStatus();
}

absl::StatusOr<ReceivedMessage> DecodePushMessage(const grpc::ByteBuffer& buffer) {
  auto slices = std::make_shared<std::vector<grpc::Slice>>();
  if (!buffer.Dump(slices.get()).ok()) return Malformed("unreadable buffer");
  PieceReader reader(*slices);
  ReceivedMessage message;
  while (reader.remaining() > 0) {
    uint32_t field, wire_type;
    if (absl::Status s = ReadTag(reader, &field, &wire_type); !s.ok()) return s;
    if ((field == kMessageHeader || field == kMessageChunk) && wire_type != kLengthDelimited) {
      return Malformed(absl::StrCat("field ", field, " is not length-delimited"));
    }
    if (field != kMessageHeader && field != kMessageChunk) {
      if (absl::Status s = SkipField(reader, field, wire_type); !s.ok()) return s;
      continue;
    }
    if (message.header.has_value() || message.chunk.has_value()) {
      return Malformed("more than one header or chunk in one message");
    }
    int64_t length;
    if (absl::Status s = ReadLength(reader, field, &length); !s.ok()) return s;
    if (field == kMessageHeader) {
      std::string bytes;
      reader.CopyBytes(length, &bytes);
      message.header.emplace();
      if (!message.header->ParseFromString(bytes)) return Malformed("the header does not parse");
    } else {
      absl::StatusOr<ReceivedChunk> chunk = ReadChunk(reader, length);
      if (!chunk.ok()) return chunk.status();
      chunk->slices = slices;
      message.chunk = *std::move(chunk);
    }
  }
  if (!message.header.has_value() && !message.chunk.has_value()) {
    return Malformed("neither a header nor a chunk");
  }
  return message;
}

}  // namespace baton::kvtransfer
