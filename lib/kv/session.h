// Saved sessions: a path of the tree (or a sequence's whole history) with
// its KV in a file, loaded back into a tree without evaluating anything.
//
// File layout (little-endian, as the machines clade runs on):
//   "CLADEKV1"            8 bytes
//   u32 version (1)
//   u64 the model's fingerprint (model_fingerprint)
//   char backend[16]      the backend whose KV layout follows ("cpu", ...)
//   u32 kv_type, n_layers, n_kv_heads, head_dim
//   u64 n_tokens
//   i32 tokens[n_tokens]
//   u64 kv_bytes          the KV of the n tokens, as a store of capacity
//                         n_tokens of that backend lays it out
//   u8  kv[kv_bytes]
//   u64 FNV-1a 64 of every byte before it
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/tree.h"

namespace clade {

// A hash of what makes KV of one model unusable by another: the
// configuration, every tensor's name, type and shape, and the first bytes
// of its data (two random models of one shape differ there).
uint64_t model_fingerprint(const Model& m);

// Write the history whose path is root .. node, then own_n tokens of own
// (from own_at; own may be null) with own_tokens, to path (a temporary
// file, then renamed). own must have the tree's KV type.
void session_save(const Tree& tree, const Node* node, const KVStore* own, int32_t own_at,
                  const std::vector<int32_t>& own_tokens, const std::string& path);

// Load a file into tree: its tokens matched against the tree as
// Tree::append_prefix matches (a node split where they diverge), the rest
// put from the file's KV into a new node (possibly empty) under the match.
// Returns the new node (the caller's reference); *n_tokens: the file's
// tokens, *reused: those the tree held already.
clade_node_id session_load(Tree& tree, const std::string& path, size_t* n_tokens, size_t* reused);

}  // namespace clade
