// main() for the fuzz targets in builds without libFuzzer: runs LLVMFuzzerTestOneInput on every file named
// on the command line and on every regular file of every directory named (in name order), so that the seed
// corpora and each crash reproducer in fuzz/regressions/ are a CTest test of every build. A failing check
// aborts; the program prints each file's name first so the failing one is known.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int a = 1; a < argc; ++a) {
    const fs::path path = argv[a];
    if (fs::is_directory(path)) {
      std::vector<fs::path> entries;
      for (const auto& entry : fs::directory_iterator(path))
        if (entry.is_regular_file() && entry.path().filename().string()[0] != '.') entries.push_back(entry.path());
      std::sort(entries.begin(), entries.end());
      files.insert(files.end(), entries.begin(), entries.end());
    } else if (fs::is_regular_file(path)) {
      files.push_back(path);
    } else {
      std::fprintf(stderr, "%s: not a file or directory\n", argv[a]);
      return 2;
    }
  }
  for (const fs::path& file : files) {
    std::fprintf(stderr, "%s\n", file.c_str());
    std::ifstream stream(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs\n", files.size());
  return 0;
}
