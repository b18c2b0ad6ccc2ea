// BlockPool (lib/block_pool.h), the CUDA backend's free list of released
// blocks, against a plain model of what it must do: a request gets a
// waiting block of at least its size and at most a quarter more (plus
// kSlack), the smallest such one, never one in use; no more than the limit
// waits; drain hands back every waiting block once. Then 20,000 random
// allocations and releases over a fake allocator (the KV stores of
// sequences that grow and end), every block's bytes written by its holder
// and checked when it is released: a block handed to two holders at once
// would fail.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "base/block_pool.h"
#include "check.h"

namespace {

using clade::BlockPool;

void test_rules() {
  std::vector<char> mem(1 << 20);
  char* a = mem.data();  // fake blocks: addresses inside mem
  BlockPool pool(100000000);
  CHECK(pool.take(100) == nullptr);
  pool.made(a, 4000000);
  pool.made(a + 1, 8000000);
  pool.made(a + 2, 5200000);
  CHECK(!pool.keep(a + 3));  // never made: the caller frees it
  CHECK(pool.keep(a) && pool.keep(a + 1) && pool.keep(a + 2));
  CHECK(pool.cached_bytes() == 17200000 && pool.cached_blocks() == 3 && pool.live_blocks() == 0);
  // 6,000,000: 8,000,000 is over a quarter more plus the slack; 5,200,000
  // is below
  CHECK(pool.take(6000000) == nullptr);
  // 4,400,000 fits 5,200,000 (and 4,000,000 is below): the smallest that fits
  CHECK(pool.take(4400000) == a + 2);
  CHECK(pool.take(3600000) == a);  // 4,000,000: within a quarter more
  CHECK(pool.take(6800000) == a + 1);
  CHECK(pool.cached_bytes() == 0 && pool.live_blocks() == 3);
  CHECK(pool.take(1) == nullptr);
  // Small requests: the slack lets a block of 64 KiB more serve them.
  pool.made(a + 4, 66000);
  CHECK(pool.keep(a + 4) && pool.take(1000) == a + 4);
  // The limit: 250,000 bytes wait at most.
  BlockPool small(250000);
  small.made(a, 200000);
  small.made(a + 1, 100000);
  CHECK(small.keep(a));
  CHECK(!small.keep(a + 1));  // 300000 would pass the limit: the caller frees it
  CHECK(small.cached_bytes() == 200000 && small.live_blocks() == 0);
  std::vector<void*> d;
  small.drain([&](void* p) { d.push_back(p); });
  CHECK(d.size() == 1 && d[0] == a && small.cached_bytes() == 0 && small.take(200000) == nullptr);
  BlockPool none(0);  // a limit of 0 keeps nothing
  none.made(a, 1);
  CHECK(!none.keep(a));
}

void test_random() {
  std::mt19937_64 rng(7);
  BlockPool pool(64 << 20);
  struct Held {
    void* p;
    size_t bytes;
    uint8_t tag;
  };
  std::vector<Held> held;
  std::set<void*> out;  // blocks from the fake allocator, not yet freed
  size_t mallocs = 0, reused = 0;
  auto fill = [](void* p, size_t n, uint8_t tag) { std::memset(p, tag, n); };
  auto intact = [](const void* p, size_t n, uint8_t tag) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; i++)
      if (b[i] != tag) return false;
    return true;
  };
  const int failures0 = check_failures();
  for (int step = 0; step < 20000; step++) {
    if (held.size() < 64 && (held.empty() || rng() % 2)) {
      // a store of 16..1024 tokens of 4 KiB, in steps of 16 tokens
      const size_t bytes = (size_t)(16 + 16 * (rng() % 64)) * 4096;
      void* p = pool.take(bytes);
      if (p) {
        reused++;
      } else {
        p = std::malloc(bytes);
        out.insert(p);
        pool.made(p, bytes);
        mallocs++;
      }
      const uint8_t tag = (uint8_t)(1 + rng() % 255);
      fill(p, bytes, tag);
      held.push_back({p, bytes, tag});
    } else {
      const size_t i = (size_t)(rng() % held.size());
      const Held h = held[i];
      CHECK_MSG(intact(h.p, h.bytes, h.tag), "step %d: a held block was written by another holder", step);
      held.erase(held.begin() + (long)i);
      if (!pool.keep(h.p)) {
        out.erase(h.p);
        std::free(h.p);
      }
    }
    CHECK(pool.cached_bytes() <= (64u << 20));
    if (check_failures() > failures0) break;
  }
  for (const Held& h : held) CHECK(pool.keep(h.p) || (out.erase(h.p), std::free(h.p), true));
  pool.drain([&](void* p) {
    CHECK(out.erase(p) == 1);
    std::free(p);
  });
  CHECK_MSG(out.empty(), "%zu blocks neither waiting nor freed", out.size());
  std::fprintf(stderr, "random: %zu allocations, %zu reused blocks\n", mallocs, reused);
  CHECK(reused > mallocs);
}

}  // namespace

int main() {
  test_rules();
  test_random();
  return check_exit();
}
