// `clade model random`.
#include "cli.h"
#include "random_model.h"

namespace cli {

int cmd_model_random(Args& a) {
  std::string out, type = "f16", vocab_from, arch = "llama";
  int layers = 2, dim = 256, heads = 8, kv_heads = 0, ff = 0, vocab = 1024, ctx = 4096;
  uint64_t seed = 1;
  while (!a.done()) {
    std::string f = a.next("");
    if (f == "-o" || f == "--output") out = a.next(f);
    else if (f == "--layers") layers = (int)to_long(a.next(f), f);
    else if (f == "--dim") dim = (int)to_long(a.next(f), f);
    else if (f == "--heads") heads = (int)to_long(a.next(f), f);
    else if (f == "--kv-heads") kv_heads = (int)to_long(a.next(f), f);
    else if (f == "--ff") ff = (int)to_long(a.next(f), f);
    else if (f == "--vocab") vocab = (int)to_long(a.next(f), f);
    else if (f == "--ctx") ctx = (int)to_long(a.next(f), f);
    else if (f == "--type") type = a.next(f);
    else if (f == "--seed") seed = (uint64_t)to_long(a.next(f), f);
    else if (f == "--vocab-from") vocab_from = a.next(f);
    else if (f == "--arch") arch = a.next(f);
    else Args::die("model random: unknown option " + f);
  }
  if (out.empty()) Args::die("model random: -o FILE is required");
  if (kv_heads == 0) kv_heads = heads;
  if (ff == 0) ff = dim * 11 / 4 / 32 * 32;
  if (layers < 1 || dim < 2 || heads < 1 || kv_heads < 1 || ff < 1 || vocab < 1 || ctx < 1)
    Args::die("model random: sizes must be positive");
  try {
    RandomModelSpec sp;
    sp.layers = layers; sp.dim = dim; sp.heads = heads; sp.kv_heads = kv_heads; sp.ff = ff; sp.vocab = vocab;
    sp.ctx = ctx; sp.type = type; sp.seed = seed; sp.vocab_from = vocab_from; sp.arch = arch;
    write_random_model(out, sp);
  } catch (const std::exception& e) {
    Args::die(e.what());
  }
  std::fprintf(stderr, "wrote %s (random weights)\n", out.c_str());
  return 0;
}

}  // namespace cli
