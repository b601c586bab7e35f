// libFuzzer target: the packed format's parsers (index, shard header, records), as PackedSource runs
// them on bytes from disk. Input: a control byte, a 4-byte little-endian index length, the index bytes,
// then one shard's bytes (every index entry is read from it). The control byte's low bits recompute the
// index and shard-header checksums before parsing, so that mutations get past the checksums and reach
// the structural checks behind them. Seeds: scripts/make_fuzz_corpus.py (OUT/shard).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "chute/io/packed_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const uint8_t control = data[0];
  uint32_t index_len;
  std::memcpy(&index_len, data + 1, 4);
  const std::span<const uint8_t> rest(data + 5, size - 5);
  index_len = static_cast<uint32_t>(std::min<size_t>(index_len, rest.size()));
  std::vector<uint8_t> index(rest.begin(), rest.begin() + index_len);
  std::vector<uint8_t> shard(rest.begin() + index_len, rest.end());
  if ((control & 1) && index.size() >= chute::kIndexHeaderSize) {
    const uint64_t sum = chute::checksum(std::span(index).subspan(16));
    std::memcpy(index.data() + 8, &sum, 8);
  }
  if ((control & 2) && shard.size() >= chute::kShardHeaderSize) {
    const uint64_t sum = chute::checksum(std::span(shard).subspan(16, chute::kShardHeaderSize - 16));
    std::memcpy(shard.data() + 8, &sum, 8);
  }
  (void)chute::parse_shard_header(shard, "shard");
  auto view = chute::IndexView::parse(index, "index");
  if (!view.is_ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& info : view->shards()) sink = sink ^ static_cast<uint8_t>(info.name.size());
  for (const auto& name : view->classes()) sink = sink ^ static_cast<uint8_t>(name.size());
  for (uint64_t i = 0; i < view->size() && i < 4096; ++i) {
    const chute::IndexEntry e = view->entry(i);
    for (char c : view->key(e)) sink = sink ^ static_cast<uint8_t>(c);
    for (bool verify : {false, true}) {
      auto payload = chute::parse_record(shard, e, verify);
      if (!payload.is_ok()) continue;
      for (uint8_t b : *payload) sink = sink ^ b;  // ASan sees any read past the shard
    }
  }
  return 0;
}
