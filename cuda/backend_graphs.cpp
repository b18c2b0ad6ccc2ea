// The CUDA backend's passes as graphs (backend.h): a pass whose key
// repeats is captured into a CUDA graph once and replayed after, with the
// fallback to plain launches when capture fails, and the replays' device
// times (CLADE_CUDA_PASS_TIMES).
#include "backend.h"

#include <cstdio>
#include <cstring>

namespace clade {
namespace cuda_backend {

// ---- whole passes as graphs ----

uint64_t CudaBackend::state_key(const AttnWork& work, uint64_t key) const {
  const CudaAttnWork& w = static_cast<const CudaAttnWork&>(work);
  PassKey k{key};
  for (const void* p : {(const void*)&work, (const void*)w.tables.p, (const void*)w.part.p, (const void*)w.kvw.p,
                        (const void*)w.counters.p,
                        (const void*)x16_.p, (const void*)w16_.p, (const void*)argmax_parts_.p})
    k.add(p);
  for (uint64_t v : {(uint64_t)w.n_kvw, (uint64_t)w.kvw_max_n, (uint64_t)w.n_tok, (uint64_t)w.tok_unique,
                     (uint64_t)w.head_dim, (uint64_t)(copy_type_ + 1),
                     (uint64_t)x16_.cap, (uint64_t)w.sets.size()})
    k.add(v);
  uint32_t scale_bits;
  std::memcpy(&scale_bits, &w.scale, 4);
  k.add(scale_bits);
  for (const CudaAttnWork::Set& st : w.sets)
    for (uint64_t v : {(uint64_t)st.type, (uint64_t)st.at, (uint64_t)st.n_units, (uint64_t)st.n_mma_units,
                       (uint64_t)st.n_splits, (uint64_t)st.split_rows, (uint64_t)st.b_desc, (uint64_t)st.b_unit,
                       (uint64_t)st.b_mma, (uint64_t)st.b_split, (uint64_t)st.part_o_at, (uint64_t)st.part_lse_at,
                       (uint64_t)st.part_rows})
      k.add(v);
  return k.h;
}

Backend::PassMode CudaBackend::pass_begin(const AttnWork& work, uint64_t key) {
  auto lock = gate();
  enter();
  if (!opt_.use_graphs || capturing_) return PassMode::plain;
  const uint64_t k = state_key(work, key);
  const uint64_t now = ++graph_clock_;
  for (Graph& g : graphs_)
    if (g.key == k) {
      if (opt_.pass_times) {
        pass_time_read();
        check(cudaEventRecord(pass_ev_[0], stream_), "timing a pass");
      }
      check(cudaGraphLaunch(g.exec, stream_), "replaying a pass");
      if (opt_.pass_times) {
        check(cudaEventRecord(pass_ev_[1], stream_), "timing a pass");
        pass_timed_ = true;
        pass_timed_key_ = k;
      }
      g.used = now;
      return PassMode::replayed;
    }
  auto seen = std::find_if(seen_.begin(), seen_.end(), [k](const std::pair<uint64_t, uint64_t>& e) { return e.first == k; });
  if (seen == seen_.end()) {  // the first time: plain operations
    if (seen_.size() >= kSeenKeys)
      seen_.erase(std::min_element(seen_.begin(), seen_.end(),
                                   [](const std::pair<uint64_t, uint64_t>& a, const std::pair<uint64_t, uint64_t>& b) {
                                     return a.second < b.second;
                                   }));
    seen_.emplace_back(k, now);
    return PassMode::plain;
  }
  seen_.erase(seen);
  // The second time: record the operations (not run until pass_end).
  if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
    (void)cudaGetLastError();
    opt_.use_graphs = false;  // the stream does not capture: plain operations from now on
    return PassMode::plain;
  }
  capturing_ = true;
  capture_broken_ = false;
  capture_owner_ = std::this_thread::get_id();
  capture_key_ = k;
  return PassMode::recording;
}

void CudaBackend::recording_failed() {
  if (opt_.verbose)
    std::fprintf(stderr, "clade cuda: a pass's recording failed: %s off\n",
                 opt_.pdl ? "programmatic launches" : "graphs");
  if (opt_.pdl) opt_.pdl = false;
  else opt_.use_graphs = false;
}

void CudaBackend::pass_time_read() {
  if (!pass_timed_) return;
  pass_timed_ = false;
  float ms = 0.0f;
  if (cudaEventSynchronize(pass_ev_[1]) != cudaSuccess ||
      cudaEventElapsedTime(&ms, pass_ev_[0], pass_ev_[1]) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  for (Graph& g : graphs_)
    if (g.key == pass_timed_key_ && g.ms.size() < ((size_t)1 << 20)) g.ms.push_back(ms);
}

void CudaBackend::pass_time_report(const Graph& g) {
  if (g.ms.empty()) return;
  std::vector<float> t;
  try {  // (from destroy(), which must not throw)
    t = g.ms;
  } catch (...) {
    return;
  }
  std::sort(t.begin(), t.end());
  std::fprintf(stderr,
               "clade cuda: a pass's graph of %zu nodes, %zu replays timed: device %.4f ms least, %.4f median\n",
               g.nodes, t.size(), (double)t[0], (double)t[t.size() / 2]);
}

bool CudaBackend::pass_end(bool ok) {
  auto lock = gate();
  if (capture_broken_) {  // given up on the way (no_capture): nothing of it ran
    capture_broken_ = false;
    return false;
  }
  if (!capturing_) return true;  // a plain pass: it ran (or threw: the caller rethrows)
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(stream_, &graph);
  capturing_ = false;
  capture_cv_.notify_all();
  if (!ok || e != cudaSuccess || !graph) {
    // A recording that failed or threw (perhaps for being a recording):
    // nothing ran, the caller runs the pass plainly, and no more recordings
    // (with programmatic launches on: none of those, then recordings again).
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    recording_failed();
    return false;
  }
  cudaGraphExec_t exec = nullptr;
  size_t nodes = 0;
  if (cudaGraphGetNodes(graph, nullptr, &nodes) != cudaSuccess) {
    (void)cudaGetLastError();
    nodes = 0;
  }
  e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    recording_failed();
    return false;
  }
  if (graphs_.size() >= kMaxGraphs) {  // the least recently used goes (freed once it has run)
    auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                [](const Graph& a, const Graph& b) { return a.used < b.used; });
    pass_time_read();
    pass_time_report(*lru);
    cudaGraphExecDestroy(lru->exec);
    graphs_.erase(lru);
  }
  graphs_.push_back(Graph{capture_key_, exec, ++graph_clock_, nodes, {}});
  enter();
  check(cudaGraphLaunch(exec, stream_), "running a captured pass");
  return true;
}

}  // namespace cuda_backend
}  // namespace clade
