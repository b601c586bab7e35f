#include "chute/order/remainder.h"

#include <algorithm>
#include <string>
#include <utility>

#include "chute/order/sampler.h"

namespace chute {
namespace {

using Places = std::vector<std::pair<int64_t, int64_t>>;  // sorted, disjoint [begin, end) of list places

void add(Places& places, int64_t begin, int64_t end) {
  if (begin >= end) return;
  if (!places.empty() && places.back().second == begin) {
    places.back().second = end;
  } else {
    places.emplace_back(begin, end);
  }
}

// The places of a list of `size` that `split`'s ranks were given and did not receive (`share`: each rank's).
Places places_left(int64_t size, bool contiguous, bool even_split, const EpochSplit& split,
                   const std::vector<int64_t>& share) {
  const int64_t world = split.world_size;
  const std::vector<int64_t>& got = split.received;
  Places left;
  if (contiguous) {  // rank r: places [first, first + share), in rank order
    for (int64_t r = 0; r < world; ++r) {
      const int64_t first = EpochOrder::rank_first(size, {r, world, even_split});
      add(left, first + got[r], first + share[r]);
    }
    return left;
  }
  // Interleaved: rank r's k-th place is k * world + r, a "row" k per round of the ranks. Rows below the
  // least received are all received; rows from the most received to the shortest share are whole; only the
  // rows between (and the last, partial one) are looked at rank by rank.
  const int64_t low = *std::min_element(got.begin(), got.end());
  const int64_t high = *std::max_element(got.begin(), got.end());
  const int64_t whole_end = share[world - 1], rows_end = share[0];  // shares shrink with the rank
  for (int64_t k = low; k < rows_end; ++k) {
    if (k >= high && k < whole_end) {
      add(left, k * world, whole_end * world);
      k = whole_end - 1;
      continue;
    }
    for (int64_t r = 0; r < world; ++r) {
      if (got[r] <= k && k < share[r]) add(left, k * world + r, k * world + r + 1);
    }
  }
  return left;
}

}  // namespace

Result<std::shared_ptr<const EpochRemainder>> EpochRemainder::create(int64_t n, bool contiguous, bool even_split,
                                                                     const std::vector<EpochSplit>& splits) {
  if (n < 0) return invalid_argument("an epoch of " + std::to_string(n) + " samples");
  std::shared_ptr<EpochRemainder> rest(new EpochRemainder);
  rest->n_ = n;
  rest->contiguous_ = contiguous;
  if (n > 0) rest->first_ = {0}, rest->starts_ = {0, n};
  for (size_t s = 0; s < splits.size(); ++s) {
    const EpochSplit& split = splits[s];
    const std::string which = "split " + std::to_string(s) + " (world_size " + std::to_string(split.world_size) + ")";
    if (split.world_size < 1) return invalid_argument(which + ": world_size must be >= 1");
    if (static_cast<int64_t>(split.received.size()) != split.world_size)
      return invalid_argument(which + ": " + std::to_string(split.received.size()) +
                              " received counts, one per rank expected");
    const int64_t size = rest->size();
    std::vector<int64_t> share(static_cast<size_t>(split.world_size));
    for (int64_t r = 0; r < split.world_size; ++r) {
      share[r] = EpochOrder::rank_size(size, {r, split.world_size, even_split});
      if (split.received[r] < 0 || split.received[r] > share[r])
        return invalid_argument(which + ": rank " + std::to_string(r) + " received " +
                                std::to_string(split.received[r]) + " samples, its share of the " +
                                std::to_string(size) + " left is " + std::to_string(share[r]));
    }
    // The places left, mapped through the runs to positions: the new runs (adjacent ones merged).
    std::vector<int64_t> starts{0}, first;
    size_t j = 0;
    for (auto [begin, end] : places_left(size, contiguous, even_split, split, share)) {
      while (begin < end) {
        while (rest->starts_[j + 1] <= begin) ++j;  // the run holding place `begin` (places ascend)
        const int64_t piece_end = std::min(end, rest->starts_[j + 1]);
        const int64_t position = rest->first_[j] + (begin - rest->starts_[j]);
        const int64_t length = piece_end - begin;
        if (!first.empty() && first.back() + (starts.back() - starts[starts.size() - 2]) == position) {
          starts.back() += length;
        } else {
          first.push_back(position);
          starts.push_back(starts.back() + length);
        }
        begin = piece_end;
      }
    }
    rest->starts_ = std::move(starts);
    rest->first_ = std::move(first);
  }
  return std::shared_ptr<const EpochRemainder>(std::move(rest));
}

int64_t EpochRemainder::operator()(int64_t i) const {
  CHUTE_CHECK(i >= 0 && i < size());
  const size_t j = static_cast<size_t>(std::upper_bound(starts_.begin() + 1, starts_.end(), i) - starts_.begin() - 1);
  return first_[j] + (i - starts_[j]);
}

}  // namespace chute
