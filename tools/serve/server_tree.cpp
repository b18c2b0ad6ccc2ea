// `clade serve`: routing keys (X-Clade-Prefix-Key) and their per-key
// counts, and the /v1/tree snapshot of the prefix tree, built on the
// scheduler thread through the public tree API only.
#include "server.h"

namespace cli {
namespace serve {

namespace {

std::string fnv1a_hex(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)h);
  return b;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The first `max` bytes of s, cut back to a UTF-8 character boundary.
std::string utf8_head(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
  return s.substr(0, n);
}

}  // namespace

std::string Server::computed_prefix_key(const json& j, bool chat) {
  if (chat) {
    const json& ms = j["messages"];  // parse() checked it: a non-empty list of messages
    size_t at = 0;
    for (size_t i = 0; i < ms.size(); i++)
      if (ms[i]["role"] == "system") {
        at = i;
        break;
      }
    return fnv1a_hex(content_text(ms[at]["content"], at));
  }
  const json& p = j["prompt"];
  if (p.is_string()) return fnv1a_hex(p.get<std::string>().substr(0, 256));
  if (p.is_array() && p.size() == 1 && p[0].is_string()) return fnv1a_hex(p[0].get<std::string>().substr(0, 256));
  std::string ids;
  for (size_t i = 0; i < p.size() && i < 64; i++) ids += (i ? "," : "") + dump(p[i]);
  return fnv1a_hex(ids);
}

void Server::count_key(const Request& r, size_t evaluated, size_t reused) {
  std::lock_guard<std::mutex> lk(keys_mu_);
  if (seen_keys_.size() < kMaxSeenKeys) seen_keys_.insert(r.prefix_key);
  KeyStats* k = nullptr;
  for (auto& e : keys_)
    if (e.first == r.prefix_key) k = &e.second;
  if (!k && keys_.size() < kMaxKeys) {
    keys_.push_back({r.prefix_key, KeyStats{}});
    k = &keys_.back().second;
  }
  if (!k) k = &other_keys_;
  k->requests++;
  k->evaluated += evaluated;
  k->reused += reused;
}

void Server::touch(clade_node_id node) {
  const double now = unix_now();
  clade_node_info ni;
  for (int guard = 0; node > 0 && guard < 100000; guard++) {
    last_used_[node] = now;
    clade_node_info_init(&ni);
    if (clade_tree_node_info(tree_, node, &ni) != CLADE_OK) break;
    node = ni.parent;
  }
}

std::string Server::tree_json() {
  const double now = unix_now();
  // Live sequences per node: each sequence counts on its node and every
  // node above it.
  std::unordered_map<clade_node_id, int> here;
  for (const RequestPtr& r : live_)
    for (const Choice& c : r->choices) {
      clade_node_id n = -1;
      if (c.seq >= 0 && clade_cache_seq_node(cache_, c.seq, &n) == CLADE_OK) here[n]++;
    }
  struct Node {
    clade_node_id id, parent;
    int depth;
    clade_node_info info;
    std::vector<clade_node_id> children;
    int seqs = 0;
    double last = 0;
  };
  std::vector<Node> nodes;
  std::unordered_map<clade_node_id, size_t> index;
  const size_t kMaxNodes = 4000;
  bool truncated = false;
  // Depth first from the root, children oldest first.
  std::vector<std::pair<clade_node_id, int>> stack{{0, 0}};
  std::vector<clade_node_id> kids;
  while (!stack.empty()) {
    auto [id, depth] = stack.back();
    stack.pop_back();
    if (nodes.size() >= kMaxNodes) {
      truncated = true;
      break;
    }
    Node n;
    n.id = id;
    n.depth = depth;
    clade_node_info_init(&n.info);
    if (clade_tree_node_info(tree_, id, &n.info) != CLADE_OK) continue;
    n.parent = n.info.parent;
    size_t nk = 0;
    clade_status st = clade_tree_children(tree_, id, nullptr, 0, &nk);
    kids.resize(nk);
    if (nk && (st == CLADE_BUFFER_SMALL || st == CLADE_OK))
      st = clade_tree_children(tree_, id, kids.data(), kids.size(), &nk);
    if (st == CLADE_OK) n.children.assign(kids.begin(), kids.begin() + (long)std::min(nk, kids.size()));
    auto it = last_used_.find(id);
    n.last = it != last_used_.end() ? it->second : 0;
    index[id] = nodes.size();
    for (size_t k = n.children.size(); k-- > 0;) stack.push_back({n.children[k], depth + 1});
    nodes.push_back(std::move(n));
  }
  // Bottom up (children come after their parent): sequences and last use
  // add up from the leaves; a node in use by a sequence is used now.
  for (size_t i = nodes.size(); i-- > 0;) {
    Node& n = nodes[i];
    auto h = here.find(n.id);
    if (h != here.end()) n.seqs += h->second;
    if (n.seqs > 0) n.last = now;
    if (n.parent >= 0) {
      auto p = index.find(n.parent);
      if (p != index.end()) {
        nodes[p->second].seqs += n.seqs;
        nodes[p->second].last = std::max(nodes[p->second].last, n.last);
      }
    }
  }
  // Forget the last use of nodes gone (evicted, freed).
  for (auto it = last_used_.begin(); it != last_used_.end();)
    it = index.count(it->first) ? std::next(it) : last_used_.erase(it);
  json out_nodes = json::array();
  std::vector<clade_token> toks;
  std::string text(512, '\0');
  uint64_t total_bytes = 0;
  for (const Node& n : nodes) {
    const int len = n.info.length;
    // The excerpt: the first tokens, detokenized with control tokens shown.
    std::string excerpt;
    if (len > 0) {
      size_t got = 0;
      toks.resize((size_t)len);
      if (clade_tree_node_tokens(tree_, n.id, toks.data(), toks.size(), &got) == CLADE_OK) {
        size_t take = std::min<size_t>(got, 48), nb = 0;
        if (clade_detokenize(model_, toks.data(), take, 1, text.data(), text.size(), &nb) == CLADE_OK)
          excerpt = std::string(text.data(), nb);
        else if (clade_detokenize(model_, toks.data(), std::min<size_t>(take, 8), 1, text.data(), text.size(),
                                  &nb) == CLADE_OK)
          excerpt = std::string(text.data(), nb);
      }
    }
    const bool cut = excerpt.size() > 60 || (len > 48);
    excerpt = utf8_head(excerpt, 60);
    const uint64_t bytes = (uint64_t)std::max(len, 0) * kv_token_bytes_;
    total_bytes += bytes;
    out_nodes.push_back({{"id", n.id},
                         {"parent", n.parent},
                         {"depth", n.depth},
                         {"tokens", len},
                         {"position", n.info.path_length},
                         {"text", excerpt},
                         {"text_cut", cut},
                         {"kv_bytes", bytes},
                         {"sequences", n.seqs},
                         {"sequences_here", here.count(n.id) ? here[n.id] : 0},
                         {"children", n.children},
                         {"refs", n.info.n_refs},
                         {"cached", n.id != 0 && n.info.n_refs == 0},
                         {"evictable", n.id != 0 && n.seqs == 0},
                         {"last_used", n.last > 0 ? json(n.last) : json(nullptr)},
                         {"idle_seconds", n.last > 0 ? json(std::max(0.0, now - n.last)) : json(nullptr)}});
  }
  size_t queued;
  {
    std::lock_guard<std::mutex> lk(qmu_);
    queued = queue_.size();
  }
  json out = {{"time", now},
              {"model", model_name_},
              {"kv_used_bytes", clade_tree_kv_used(tree_)},
              {"kv_budget_bytes", opt_.kv_budget},
              {"kv_token_bytes", kv_token_bytes_},
              {"node_kv_bytes", total_bytes},
              {"sequences_live", (uint64_t)metrics_.live_seqs},
              {"requests_queued", queued},
              {"draining", (bool)draining_},
              {"truncated", truncated},
              {"nodes", out_nodes}};
  return dump(out);
}

}  // namespace serve
}  // namespace cli
