#include "chute/formats/tfrecord.h"

#include <cstring>

#include "chute/formats/crc32c.h"

namespace chute {
namespace {

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

bool is_tfrecord_header(std::span<const uint8_t> header) {
  return header.size() >= kTfRecordHeaderSize && mask_crc32c(crc32c(header.first(8))) == load_u32(header.data() + 8);
}

Result<TfRecord> read_tfrecord_header(std::span<const uint8_t> file, uint64_t pos, size_t index,
                                      const std::string& what) {
  const std::string at = what + ": record " + std::to_string(index) + " at offset " + std::to_string(pos);
  if (pos == 0 && file.size() >= 2 && file[0] == 0x1f && file[1] == 0x8b)
    return unsupported(what +
                       " is GZIP-compressed (TFRecordOptions(compression_type='GZIP')): chute reads records "
                       "in place and cannot seek inside a compressed stream; decompress it once (`gunzip -c " +
                       what + " > x.tfrecord`, or rewrite it uncompressed) and open that");
  if (pos > file.size() || file.size() - pos < kTfRecordHeaderSize)
    return corrupt_data(at + ": " + std::to_string(file.size() - std::min<uint64_t>(pos, file.size())) +
                        " bytes left, fewer than a record header (truncated TFRecord file?)");
  const auto header = file.subspan(pos, kTfRecordHeaderSize);
  if (!is_tfrecord_header(header))
    return corrupt_data(
        at + ": the length's CRC does not match (" +
        (pos == 0 ? std::string("not a TFRecord file, or a ZLIB-compressed one") : std::string("corrupt file")) + ")");
  uint64_t size;
  std::memcpy(&size, header.data(), 8);
  const uint64_t left = file.size() - pos - kTfRecordHeaderSize;
  if (size > left || left - size < kTfRecordFooterSize)
    return corrupt_data(at + ": a record of " + std::to_string(size) + " bytes runs past the end of the file (" +
                        std::to_string(left) + " bytes left: truncated TFRecord file?)");
  return TfRecord{.offset = pos + kTfRecordHeaderSize, .size = size};
}

Result<std::vector<TfRecord>> scan_tfrecord(std::span<const uint8_t> file, const std::string& what) {
  std::vector<TfRecord> out;
  for (uint64_t pos = 0; pos < file.size();) {
    CHUTE_ASSIGN_OR_RETURN(const TfRecord r, read_tfrecord_header(file, pos, out.size(), what));
    out.push_back(r);
    pos = r.offset + r.size + kTfRecordFooterSize;
  }
  return out;
}

Status check_tfrecord_crc(std::span<const uint8_t> record) {
  if (record.size() < kTfRecordFooterSize) return corrupt_data("a TFRecord record without its CRC");
  const auto data = record.first(record.size() - kTfRecordFooterSize);
  const uint32_t stored = load_u32(record.data() + data.size()), actual = mask_crc32c(crc32c(data));
  if (stored != actual)
    return corrupt_data("the record's CRC-32C does not match its data (stored " + std::to_string(stored) +
                        ", computed " + std::to_string(actual) + "): corrupt record");
  return Status::ok();
}

}  // namespace chute
