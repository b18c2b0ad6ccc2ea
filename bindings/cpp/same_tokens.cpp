// same_tokens.cpp: the C++ program of the cross-language check
// (tests/bindings_same_tokens.sh): loads the model argv[1], makes a tree and
// generates greedily from three prompts (1..24; [30 31 32] and [40 41]
// under it), 32 new tokens each with end-of-generation ignored, and prints
// each sequence's tokens on a line, separated by single spaces.
#include <clade/clade.hpp>

#include <cstdio>
#include <numeric>
#include <vector>

namespace {
void print(const clade::Generation& gen) {
  for (size_t i = 0; i < gen.size(); i++) {
    const char* sep = "";
    for (clade::Token t : gen.tokens(i)) std::printf("%s%d", sep, (int)t), sep = " ";
    std::printf("\n");
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: same_tokens MODEL\n"), 2;
  std::vector<clade::Token> p0(24);
  std::iota(p0.begin(), p0.end(), 1);
  const std::vector<clade::Token> p1 = {30, 31, 32}, p2 = {40, 41};
  const std::vector<clade::Prompt> prompts = {clade::Prompt(p0), clade::Prompt(p1, 0), clade::Prompt(p2, 0)};
  clade::SamplerParams greedy = clade::SamplerParams::greedy();
  clade::GenerateParams params;
  params.max_new_tokens = 32, params.ignore_eog = 1, params.sampler = &greedy;
#if defined(CLADE_HPP_EXCEPTIONS)
  try {
    clade::Model model = clade::Model::load(argv[1]);
    clade::Tree tree = clade::Tree::create(model);
    print(tree.generate(prompts, params));
  } catch (const clade::Error& e) {
    return std::fprintf(stderr, "same_tokens: %s\n", e.what()), 1;
  }
#else  // -fno-exceptions: each step's expected<T>
  auto model = clade::Model::load(argv[1]);
  if (!model) return std::fprintf(stderr, "same_tokens: %s\n", model.error().what()), 1;
  auto tree = clade::Tree::create(*model);
  if (!tree) return std::fprintf(stderr, "same_tokens: %s\n", tree.error().what()), 1;
  auto gen = tree->generate(prompts, params);
  if (!gen) return std::fprintf(stderr, "same_tokens: %s\n", gen.error().what()), 1;
  print(*gen);
#endif
  return 0;
}
