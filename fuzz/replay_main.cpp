// A libFuzzer harness run without libFuzzer: the ordinary and sanitizer
// builds compile every harness, and ctest replays its seeds, each file whole
// and cut short at 63 points (a cut header, string or table is the commonest
// corrupt input). libFuzzer itself (clang only) runs from scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SEED_FILE...\n", argv[0]);
    return 2;
  }
  size_t runs = 0;
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "fuzz replay: cannot read %s\n", argv[i]);
      return 2;
    }
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (size_t cut = 1; cut <= 64; ++cut, ++runs) LLVMFuzzerTestOneInput(bytes.data(), bytes.size() * cut / 64);
  }
  std::printf("fuzz replay: %zu inputs from %d files, no failure\n", runs, argc - 1);
  return 0;
}
