// Runs a harness of tests/fuzz/ over files and folders of inputs (its
// corpus and its regression inputs), without libFuzzer: what the normal
// test run does with every compiler.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static int run_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return 1;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return 0;
}

int main(int argc, char** argv) {
  int files = 0, bad = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      std::fprintf(stderr, "replay: no such file or folder %s\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      bad += run_file(argv[i]);
      files++;
      continue;
    }
    DIR* d = opendir(argv[i]);
    std::vector<std::string> names;
    for (dirent* e; d && (e = readdir(d));)
      if (e->d_name[0] != '.') names.push_back(std::string(argv[i]) + "/" + e->d_name);
    if (d) closedir(d);
    for (const std::string& n : names) {
      bad += run_file(n);
      files++;
    }
  }
  std::printf("replayed %d inputs\n", files);
  return bad ? 1 : 0;
}
