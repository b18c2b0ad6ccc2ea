// Prepacked prefill (docs/design.md, "Packed prefill"): many prompts, nodes
// and sequences evaluated together in forward passes of at most C tokens,
// packed by first-fit decreasing instead of padded to the longest.
#pragma once

#include <cstdint>
#include <vector>

namespace clade {

// A piece of an item in a pass: tokens [off, off + n) of item `item`.
struct PackPiece {
  int32_t item, off, n;
};

// Pack items of lengths len[i] into passes of at most chunk tokens. An
// item longer than chunk is cut into pieces of chunk tokens (the last one
// shorter), each in a later pass than the one before; an item with
// parent[i] >= 0 (an earlier item) goes into passes after its parent's
// last piece (an empty parent has none: after its nearest ancestor's).
// Within those rules pieces are placed by first-fit decreasing: the pieces
// of each level of the item tree, largest first (ties in item order), each
// into the first pass it may go in that has room. Items of
// length 0 get no piece. out: the passes, in order; each pass's pieces in
// the order they were placed. Vectors are reused (cleared) from call to call.
void pack_items(const std::vector<int32_t>& len, const std::vector<int32_t>& parent, int32_t chunk,
                std::vector<std::vector<PackPiece>>& out);

}  // namespace clade
