// example.cpp: the C++ example of bindings/cpp/README.md (the install test
// builds it against an installed libclade and checks the README shows it):
// four continuations of a story under a shared prompt, streamed as they
// come, then token by token through the TokenStream range.
#include <clade/clade.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) try {
  clade::Model model = clade::Model::load(argc > 1 ? argv[1] : "model.gguf");
  clade::Tree tree = clade::Tree::create(model);
  std::vector<clade::Token> story = model.tokenize("Once upon a time");
  std::vector<clade::Token> dragon = model.tokenize(" a dragon", false);
  std::vector<clade::Prompt> prompts = {clade::Prompt(story), clade::Prompt(dragon, 0)};  // under prompt 0

  clade::SamplerParams sampling;  // clade_sampler_params_init: temperature 0.8, top-p 0.95, ...
  sampling.seed = 42;
  const char* stop[] = {"\n\n"};
  clade::GenerateParams params;  // clade_generate_params_init
  params.max_new_tokens = 32, params.n_samples = 4, params.sampler = &sampling;
  params.stop_strings = stop, params.n_stop_strings = 1;
  clade::Generation results = tree.generate(prompts, params, [](size_t seq, clade::Token, std::string_view piece) {
    std::printf("[%zu]%.*s", seq, (int)piece.size(), piece.data());
    return clade::Flow::Continue;  // or Flow::StopSeq, Flow::StopAll
  });
  std::printf("\n");
  for (size_t i = 0; i < results.size(); i++)
    std::printf("finish %d: %s\n", (int)results.finish(i), std::string(results.text(i)).c_str());

  // The same, pulled token by token (a range over decode steps; no stop strings).
  params.stop_strings = nullptr, params.n_stop_strings = 0;
  size_t tokens = 0;
  for (const clade::StreamEvent& e : tree.stream(model, prompts, params)) tokens += e.token >= 0;
  std::printf("streamed %zu tokens\n", tokens);
  return 0;
} catch (const clade::Error& e) {
  std::fprintf(stderr, "clade: %s (status %d)\n", e.what(), (int)e.status());
  return 1;
}
