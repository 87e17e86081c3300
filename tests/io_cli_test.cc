// `flashattn io` as a user runs it: for a shape small enough to count, every algorithm's counted traffic
// (the reference algorithms, the fused kernel's and decode's loops) equals its model; the fused kernel's
// blocks are printed as the kernel clamps them; nonsensical arguments end in one error line naming the
// argument and a non-zero exit status.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

struct Result {
  int status = -1;
  std::string out, err;
};

Result RunIo(const std::string& arguments) {
  // One file per process: test processes may run side by side.
  const std::string err_path =
      ::testing::TempDir() + "io_cli_test_stderr." + std::to_string(getpid()) + ".txt";
  const std::string command = std::string(FLASHATTN_CLI_PATH) + " io " + arguments + " 2>" + err_path;
  Result result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) result.out += buffer.data();
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (FILE* err = std::fopen(err_path.c_str(), "r")) {
    while (std::fgets(buffer.data(), buffer.size(), err) != nullptr) result.err += buffer.data();
    std::fclose(err);
  }
  return result;
}

int Count(const std::string& text, const std::string& word) {
  int count = 0;
  for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++count;
  return count;
}

TEST(IoCliTest, CountedEqualsModelForEveryAlgorithm) {
  const Result r = RunIo("--seqlen 97 --seqlen-k 113 --headdim 40 --heads 4 --heads-kv 2 --batch 2 --causal "
                         "--fast-memory 3000 --no-measure");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(Count(r.out, "= model"), 4) << r.out;  // standard, flash1, flash2, fused (97 rows: no decode)
  EXPECT_EQ(Count(r.out, "DIFFERS"), 0) << r.out;
  EXPECT_EQ(Count(r.out, "\nfused "), 1) << r.out;
  EXPECT_EQ(Count(r.out, "\ndecode    -         model    not applicable"), 1) << r.out;
}

TEST(IoCliTest, CountedEqualsModelForDecode) {
  const Result r = RunIo("--seqlen 2 --seqlen-k 300 --headdim 32 --heads 4 --heads-kv 2 --causal --splits 3 "
                         "--no-measure");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(Count(r.out, "= model"), 5) << r.out;
  EXPECT_EQ(Count(r.out, "DIFFERS"), 0) << r.out;
  EXPECT_EQ(Count(r.out, "\ndecode    3x100     model "), 1) << r.out;  // 3 chunks of 100 keys
}

// The kernel clamps its blocks to the sequences; the table shows the clamped sizes.
TEST(IoCliTest, PrintsTheFusedBlocksTheKernelUses) {
  const Result r = RunIo("--seqlen 5 --seqlen-k 7 --headdim 16 --no-measure");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(Count(r.out, "\nfused     5x7       model "), 1) << r.out;
}

TEST(IoCliTest, DecodeNeedsOneHeadDimension) {
  const Result r = RunIo("--seqlen 1 --seqlen-k 64 --headdim 32 --headdim-v 16 --no-measure");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(Count(r.out, "decode's K and V share one head dimension"), 1) << r.out;
  EXPECT_EQ(Count(r.out, "= model"), 4) << r.out;
}

TEST(IoCliTest, LargeShapesSkipTheCountedRunAndSaySo) {
  const Result r = RunIo("--seqlen 65536 --headdim 128 --heads 32 --no-measure");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(Count(r.out, "counted  skipped:"), 4) << r.out;
  EXPECT_EQ(Count(r.out, "= model"), 0) << r.out;
}

TEST(IoCliTest, MeasuresTheRidgePoint) {
  const Result r = RunIo("--seqlen 16 --headdim 16 --threads 1");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("ridge point"), std::string::npos) << r.out;
}

class IoCliRejectsTest : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(IoCliRejectsTest, WithOneErrorLineNamingTheArgument) {
  const auto& [arguments, named] = GetParam();
  const Result r = RunIo(std::string(arguments) + " --no-measure");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("flashattn: error: ", 0), 0u) << r.err;
  EXPECT_EQ(Count(r.err, "\n"), 1) << r.err;
  EXPECT_NE(r.err.find(named), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    Arguments, IoCliRejectsTest,
    ::testing::Values(std::make_pair("--seqlen 0 --headdim 64", "--seqlen"),
                      std::make_pair("--seqlen -4 --headdim 64", "--seqlen"),
                      std::make_pair("--seqlen 8 --seqlen-k 0 --headdim 64", "--seqlen-k"),
                      std::make_pair("--seqlen 8 --headdim 0", "--headdim"),
                      std::make_pair("--seqlen 8 --headdim 577", "--headdim"),
                      std::make_pair("--seqlen 8 --headdim 64 --headdim-v -1", "--headdim-v"),
                      std::make_pair("--seqlen 8 --headdim 64 --batch 0", "--batch"),
                      std::make_pair("--seqlen 8 --headdim 64 --heads -2", "--heads"),
                      std::make_pair("--seqlen 8 --headdim 64 --heads 6 --heads-kv 4", "--heads-kv"),
                      std::make_pair("--seqlen 8 --headdim 64 --fast-memory 0", "--fast-memory"),
                      std::make_pair("--seqlen 8 --headdim 64 --fast-memory 1035", "1x1 tile"),
                      std::make_pair("--seqlen 8 --headdim 64 --splits 0", "--splits"),
                      std::make_pair("--seqlen 1 --seqlen-k 8 --headdim 64 --splits 9", "--splits must be"),
                      std::make_pair("--seqlen 8 --headdim 64 --dtype f64", "--dtype"),
                      std::make_pair("--seqlen 8", "--headdim"),
                      std::make_pair("--seqlen 8 --headdim 64 --threads 5000", "--threads must be <= 1024"),
                      std::make_pair("--seqlen 8 --headdim 64 --max-counted-work -1", "--max-counted-work"),
                      std::make_pair("--seqlen 8 --headdim 64 --max-counted-work nan", "--max-counted-work"),
                      std::make_pair("--seqlen 8 --headdim 64 --batch 9223372036854775807", "exceeds 2^57"),
                      std::make_pair("--seqlen 3037000500 --headdim 64", "--seqlen 3037000500")));

}  // namespace
