// Sessions: a tree's or a cache's KV and tokens saved to a file and loaded
// back, checked (kv/session.h).
#include "kv/session.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "format/gguf.h"
#include "base/log.h"

namespace clade {

namespace {

constexpr char kMagic[8] = {'C', 'L', 'A', 'D', 'E', 'K', 'V', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kBackendName = 16;
// magic, version, fingerprint, backend, 4 x u32, n_tokens
constexpr size_t kHeader = 8 + 4 + 8 + kBackendName + 16 + 8;

struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  }
  template <typename T>
  void add(const T& v) {
    add(&v, sizeof v);
  }
  void add(const std::string& s) {
    add((uint64_t)s.size());
    add(s.data(), s.size());
  }
};

const char* kv_name(int32_t t) {
  switch (t) {
    case CLADE_KV_F32: return "f32";
    case CLADE_KV_F16: return "f16";
    case CLADE_KV_BF16: return "bf16";
    default: return "unknown";
  }
}

// The file's bytes, appended as written.
struct Out {
  std::vector<uint8_t> b;
  void put(const void* p, size_t n) { b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n); }
  template <typename T>
  void put(const T& v) {
    put(&v, sizeof v);
  }
};

struct In {
  const uint8_t* p;
  size_t n, at = 0;
  const std::string& path;
  void get(void* dst, size_t k) {
    if (k > n - at) fail(CLADE_E_FORMAT, "session: " + path + " is truncated (" + std::to_string(n) + " bytes)");
    std::memcpy(dst, p + at, k);
    at += k;
  }
  template <typename T>
  T get() {
    T v;
    get(&v, sizeof v);
    return v;
  }
};

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::string tmpl = path + ".tmp.XXXXXX";
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) fail(CLADE_E_IO, "session: cannot create a temporary file beside " + path + ": " + std::strerror(errno));
  size_t done = 0;
  int err = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = errno ? errno : EIO;
      break;
    }
    done += (size_t)w;
  }
  if (!err && fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && std::rename(tmpl.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(tmpl.c_str());
    fail(CLADE_E_IO, "session: cannot write " + path + ": " + std::strerror(err));
  }
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) fail(CLADE_E_IO, "session: cannot open " + path + ": " + std::strerror(errno));
  std::vector<uint8_t> b;
  uint8_t buf[1 << 16];
  size_t k;
  while ((k = std::fread(buf, 1, sizeof buf, f.get())) > 0) b.insert(b.end(), buf, buf + k);
  if (std::ferror(f.get())) fail(CLADE_E_IO, "session: cannot read " + path);
  return b;
}

}  // namespace

uint64_t model_fingerprint(const Model& m) {
  const ModelConfig& c = m.cfg;
  Fnv h;
  h.add(c.arch);
  for (int32_t v : {c.n_layers, c.n_embd, c.n_heads, c.n_kv_heads, c.head_dim, c.n_ff, c.n_vocab, c.rope_orig_ctx,
                    (int32_t)c.rope_scaling, (int32_t)c.rope_neox})
    h.add(v);
  for (float v : {c.rope_freq_base, c.rope_freq_scale, c.rope_factor, c.rope_low_freq, c.rope_high_freq, c.norm_eps})
    h.add(v);
  if (m.file)
    for (const GGUFTensor& t : m.file->tensors()) {
      h.add(t.name);
      h.add((uint32_t)t.type);
      h.add(t.ne);
      if (t.data) h.add(t.data, (size_t)std::min<uint64_t>(t.nbytes, 64));
    }
  return h.h;
}

void session_save(const Tree& tree, const Node* node, const KVStore* own, int32_t own_at,
                  const std::vector<int32_t>& own_tokens, const std::string& path) {
  const Model& m = tree.model;
  const ModelConfig& c = m.cfg;
  const int32_t own_n = (int32_t)own_tokens.size();
  if (own && own->type() != tree.kv_type)
    fail(CLADE_E_STATE, std::string("session: the sequence's KV is ") + kv_name(own->type()) + ", the tree's " +
                            kv_name(tree.kv_type) + " (a saved session has one KV type)");
  std::vector<int32_t> tokens;
  Tree::path_tokens(node, tokens);
  const int32_t n_path = (int32_t)tokens.size();
  tokens.insert(tokens.end(), own_tokens.begin(), own_tokens.end());
  const int32_t n = (int32_t)tokens.size();
  // The whole history's KV in one store of capacity n (outside the budget:
  // it lives for this call only), then to the host.
  KVStore all(*m.backend, tree.kv_type, c.n_layers, c.n_kv_heads, c.head_dim);
  std::vector<uint8_t> kv;
  if (n > 0) {
    all.reserve(n);
    for (const Node* x = node; x; x = x->parent)
      if (x->length > 0) all.copy_range(*x->kv, 0, x->length, x->path_length);
    if (own_n > 0) all.copy_range(*own, own_at, own_n, n_path);
    all.length = n;
    kv.resize(all.bytes());
    m.backend->copy_from(kv.data(), all.kv(0), kv.size());
  }
  Out o;
  o.put(kMagic, sizeof kMagic);
  o.put(kVersion);
  o.put(model_fingerprint(m));
  char be[kBackendName] = {};
  std::strncpy(be, m.backend->name(), kBackendName - 1);
  o.put(be, sizeof be);
  o.put((uint32_t)tree.kv_type);
  o.put((uint32_t)c.n_layers);
  o.put((uint32_t)c.n_kv_heads);
  o.put((uint32_t)c.head_dim);
  o.put((uint64_t)n);
  o.put(tokens.data(), tokens.size() * sizeof(int32_t));
  o.put((uint64_t)kv.size());
  o.put(kv.data(), kv.size());
  Fnv h;
  h.add(o.b.data(), o.b.size());
  o.put(h.h);
  write_file(path, o.b);
  if (log_enabled(CLADE_LOG_INFO))
    log(CLADE_LOG_INFO, "session: saved " + std::to_string(n) + " tokens (" + std::to_string(o.b.size()) +
                            " bytes) to " + path);
}

clade_node_id session_load(Tree& tree, const std::string& path, size_t* n_tokens, size_t* reused) {
  const Model& m = tree.model;
  const ModelConfig& c = m.cfg;
  const std::vector<uint8_t> b = read_file(path);
  In in{b.data(), b.size(), 0, path};
  char magic[8];
  if (b.size() < sizeof magic || std::memcmp(b.data(), kMagic, sizeof kMagic) != 0)
    fail(CLADE_E_FORMAT, "session: " + path + " is not a clade session file");
  in.get(magic, sizeof magic);
  const uint32_t version = in.get<uint32_t>();
  if (version != kVersion)
    fail(CLADE_E_UNSUPPORTED, "session: " + path + " has format version " + std::to_string(version) +
                                  " (this clade reads " + std::to_string(kVersion) + ")");
  if (b.size() < kHeader + 8 + 8)
    fail(CLADE_E_FORMAT, "session: " + path + " is truncated (" + std::to_string(b.size()) + " bytes)");
  uint64_t sum;
  std::memcpy(&sum, b.data() + b.size() - 8, 8);
  Fnv h;
  h.add(b.data(), b.size() - 8);
  if (h.h != sum) fail(CLADE_E_FORMAT, "session: " + path + " is corrupt (checksum mismatch) or truncated");
  const uint64_t fp = in.get<uint64_t>();
  char be[kBackendName];
  in.get(be, sizeof be);
  be[kBackendName - 1] = 0;
  const uint32_t kv_type = in.get<uint32_t>(), layers = in.get<uint32_t>(), kv_heads = in.get<uint32_t>(),
                 head_dim = in.get<uint32_t>();
  const uint64_t n = in.get<uint64_t>();
  if (fp != model_fingerprint(m))
    fail(CLADE_E_MISMATCH, "session: " + path + " was saved with another model (" + std::to_string(layers) +
                               " layers, " + std::to_string(kv_heads) + " KV heads of " + std::to_string(head_dim) +
                               "; its fingerprint differs from this model's)");
  if (std::strcmp(be, m.backend->name()) != 0)
    fail(CLADE_E_MISMATCH, "session: " + path + " holds KV of the " + be + " backend; this model runs on " +
                               m.backend->name());
  if ((int32_t)kv_type != (int32_t)tree.kv_type)
    fail(CLADE_E_MISMATCH, "session: " + path + " holds " + kv_name((int32_t)kv_type) + " KV; the tree keeps " +
                               kv_name(tree.kv_type));
  if ((int32_t)layers != c.n_layers || (int32_t)kv_heads != c.n_kv_heads || (int32_t)head_dim != c.head_dim)
    fail(CLADE_E_FORMAT, "session: " + path + ": KV shape differs from the model's");
  if (n > (uint64_t)(b.size() / 4)) fail(CLADE_E_FORMAT, "session: " + path + ": token count " + std::to_string(n) + " past the file's size");
  std::vector<int32_t> tokens((size_t)n);
  in.get(tokens.data(), tokens.size() * sizeof(int32_t));
  const uint64_t kv_bytes = in.get<uint64_t>();
  KVStore all(*m.backend, tree.kv_type, c.n_layers, c.n_kv_heads, c.head_dim);
  if (kv_bytes != (uint64_t)all.bytes_at((int64_t)n) || kv_bytes != b.size() - 8 - in.at)
    fail(CLADE_E_FORMAT, "session: " + path + ": " + std::to_string(kv_bytes) + " KV bytes for " +
                             std::to_string(n) + " tokens (want " + std::to_string(all.bytes_at((int64_t)n)) + ")");
  tree.check_tokens(tokens.data(), tokens.size());
  tree.check_context((int64_t)n, "session: load");
  // The tree's part first (nothing changes before a split), then the rest
  // from the file into a node of its own.
  if (n > 0) {
    all.reserve((int32_t)n);
    m.backend->copy_to(all.kv(0), b.data() + in.at, (size_t)kv_bytes);
    all.length = (int32_t)n;
  }
  const uint64_t now = tree.touch();
  size_t i = 0;
  Node* cur = tree.match(tokens.data(), tokens.size(), &i);
  NodePin pin(tree, cur);
  for (Node* x = cur; x; x = x->parent) x->used = now;
  std::unique_ptr<KVStore> rest = tree.new_store(tree.kv_type);
  const int32_t k = (int32_t)(n - i);
  if (k > 0) {
    rest->reserve(k);
    rest->copy_range(all, (int32_t)i, k, 0);
    rest->length = k;
  }
  const clade_node_id id = tree.adopt(cur, std::vector<int32_t>(tokens.begin() + (ptrdiff_t)i, tokens.end()),
                                      std::move(rest));
  tree.get(id)->used = now;
  *n_tokens = (size_t)n;
  *reused = i;
  return id;
}

}  // namespace clade
