// The flashattn program, run as a subprocess: `flashattn run` round trips through .npy files compared with
// the float64 oracle, every rejected input (non-zero exit, one line on stderr naming the argument, no output
// file created, an existing one untouched, no temporary left behind), and `flashattn demo`.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/element.h"
#include "flashattn/flashattn.h"
#include "npy.h"

namespace flashattn::testing {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int status = -1;  // exit status, or -1 if the program did not exit normally
  std::string out, err;
};

std::string ReadText(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir_template = ::testing::TempDir() + "/flashattn_cli_XXXXXX";
    ASSERT_NE(mkdtemp(dir_template.data()), nullptr);
    dir_ = dir_template;
    capture_ = dir_ / "capture";
    work_ = dir_ / "work";
    fs::create_directory(capture_);
    fs::create_directory(work_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (work_ / name).string(); }

  // Runs the program with `args` (stdout and stderr captured outside the work directory).
  Outcome Run(const std::vector<std::string>& args) const {
    std::string command = "'" FLASHATTN_CLI_PATH "'";
    for (const std::string& arg : args) command += " '" + arg + "'";
    command += " >'" + (capture_ / "out").string() + "' 2>'" + (capture_ / "err").string() + "'";
    const int status = std::system(command.c_str());
    Outcome outcome;
    if (status != -1 && WIFEXITED(status)) outcome.status = WEXITSTATUS(status);
    outcome.out = ReadText(capture_ / "out");
    outcome.err = ReadText(capture_ / "err");
    return outcome;
  }

  std::set<std::string> WorkFiles() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(work_)) names.insert(entry.path().filename().string());
    return names;
  }

  fs::path dir_, capture_, work_;
};

// A tensor of N(0, 1) values in `dtype` (float32 or float16), saved to `path`.
npy::Array RandomTensor(npy::Dtype dtype, std::vector<std::int64_t> shape, std::uint64_t seed) {
  npy::Array array(dtype, std::move(shape));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  for (std::int64_t i = 0; i < array.NumElements(); ++i) {
    if (dtype == npy::Dtype::kF32)
      array.Data<float>()[i] = normal(rng);
    else
      array.Data<std::uint16_t>()[i] = F16FromF32(normal(rng));
  }
  return array;
}

// What `flashattn run` computes, spelled out for the library: the oracle reads the same arrays.
struct RunSpec {
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  std::optional<float> scale;
  const npy::Array* alibi = nullptr;
};

// O and LSE of the float64 oracle (rounded once to the output dtype / float32) for q, k, v.
std::pair<npy::Array, npy::Array> Oracle(const npy::Array& q, const npy::Array& k, const npy::Array& v,
                                         const RunSpec& spec) {
  AttentionParams p;
  p.batch = q.shape()[0];
  p.seqlen_q = q.shape()[1];
  p.heads_q = q.shape()[2];
  p.head_dim = q.shape()[3];
  p.seqlen_k = k.shape()[1];
  p.heads_kv = k.shape()[2];
  p.head_dim_v = v.shape()[3];
  p.dtype = q.dtype() == npy::Dtype::kF16 ? DType::kF16 : DType::kF32;
  p.set_contiguous_strides();
  p.causal = spec.causal;
  p.window_left = spec.window_left;
  p.window_right = spec.window_right;
  p.softcap = spec.softcap;
  p.scale = spec.scale;
  if (spec.alibi != nullptr) {
    p.alibi_slopes = spec.alibi->Data<float>();
    p.alibi_batch_stride = spec.alibi->shape().size() == 2 ? p.heads_q : 0;
  }
  npy::Array o(q.dtype(), {p.batch, p.seqlen_q, p.heads_q, p.value_head_dim()});
  npy::Array lse(npy::Dtype::kF32, {p.batch, p.heads_q, p.seqlen_q});
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.o = o.data();
  p.lse = lse.Data<float>();
  forward(p, Algorithm::kOracle);
  return {std::move(o), std::move(lse)};
}

double AsDouble(const npy::Array& a, std::int64_t i) {
  return a.dtype() == npy::Dtype::kF16 ? F32FromF16(a.Data<std::uint16_t>()[i]) : a.Data<float>()[i];
}

// max |x − ref| / max |ref| (absolute when ref is all zero); −inf must match −inf exactly, NaN never passes.
double RelativeError(const npy::Array& x, const npy::Array& ref) {
  EXPECT_EQ(x.shape(), ref.shape());
  EXPECT_EQ(x.dtype(), ref.dtype());
  if (x.shape() != ref.shape() || x.dtype() != ref.dtype()) return INFINITY;
  double max_diff = 0.0, max_ref = 0.0;
  for (std::int64_t i = 0; i < ref.NumElements(); ++i) {
    const double a = AsDouble(x, i), b = AsDouble(ref, i);
    if (std::isinf(b) && a == b) continue;
    const double diff = std::abs(a - b);
    if (!(diff <= max_diff)) max_diff = std::isnan(diff) ? INFINITY : diff;
    max_ref = std::max(max_ref, std::abs(b));
  }
  return max_ref > 0.0 ? max_diff / max_ref : max_diff;
}

TEST_F(CliTest, RunMatchesTheOracleForEveryAlgorithmWithGqaAndDifferentDv) {
  const npy::Array q = RandomTensor(npy::Dtype::kF32, {2, 37, 4, 24}, 1);
  const npy::Array k = RandomTensor(npy::Dtype::kF32, {2, 53, 2, 24}, 2);
  const npy::Array v = RandomTensor(npy::Dtype::kF32, {2, 53, 2, 16}, 3);
  npy::Write(Path("q.npy"), q);
  npy::Write(Path("k.npy"), k);
  npy::Write(Path("v.npy"), v);
  const auto [o_ref, lse_ref] = Oracle(q, k, v, {});
  for (Algorithm algorithm : kAllAlgorithms) {
    SCOPED_TRACE(std::string(to_string(algorithm)));
    const Outcome outcome =
        Run({"run", "--q", Path("q.npy"), "--k", Path("k.npy"), "--v", Path("v.npy"), "--out", Path("o.npy"),
             "--lse", Path("lse.npy"), "--algorithm", std::string(to_string(algorithm))});
    ASSERT_EQ(outcome.status, 0) << outcome.err;
    EXPECT_EQ(outcome.err, "");
    EXPECT_LE(RelativeError(npy::Read(Path("o.npy")), o_ref), 1e-5);
    EXPECT_LE(RelativeError(npy::Read(Path("lse.npy")), lse_ref), 1e-5);
  }
  EXPECT_EQ(WorkFiles(), (std::set<std::string>{"q.npy", "k.npy", "v.npy", "o.npy", "lse.npy"}));
}

TEST_F(CliTest, RunAppliesEveryMaskAndModifier) {
  const npy::Array q = RandomTensor(npy::Dtype::kF32, {2, 29, 4, 32}, 4);
  const npy::Array k = RandomTensor(npy::Dtype::kF32, {2, 41, 1, 32}, 5);
  const npy::Array v = RandomTensor(npy::Dtype::kF32, {2, 41, 1, 32}, 6);
  npy::Array slopes(npy::Dtype::kF32, {2, 4});
  for (std::int64_t i = 0; i < 8; ++i) slopes.Data<float>()[i] = 0.05f * static_cast<float>(i + 1);
  for (const auto& [name, array] :
       {std::pair{"q.npy", &q}, {"k.npy", &k}, {"v.npy", &v}, {"slopes.npy", &slopes}})
    npy::Write(Path(name), *array);
  // The window starts rows 0..3 with no visible key (zeros, LSE = −inf) under the bottom-right alignment.
  const RunSpec spec{
      .causal = true, .window_left = 5, .window_right = 3, .softcap = 2.5f, .scale = 0.4f, .alibi = &slopes};
  const auto [o_ref, lse_ref] = Oracle(q, k, v, spec);
  const Outcome outcome = Run({"run",
                               "--q",
                               Path("q.npy"),
                               "--k",
                               Path("k.npy"),
                               "--v",
                               Path("v.npy"),
                               "--out",
                               Path("o.npy"),
                               "--lse",
                               Path("lse.npy"),
                               "--causal",
                               "--window",
                               "5",
                               "3",
                               "--softcap",
                               "2.5",
                               "--scale",
                               "0.4",
                               "--alibi",
                               Path("slopes.npy"),
                               "--threads",
                               "1"});
  ASSERT_EQ(outcome.status, 0) << outcome.err;
  EXPECT_LE(RelativeError(npy::Read(Path("o.npy")), o_ref), 1e-5);
  EXPECT_LE(RelativeError(npy::Read(Path("lse.npy")), lse_ref), 1e-5);
}

TEST_F(CliTest, RunWithoutModifiersDiffersFromTheModifiedResult) {
  // Guards the test above: the options must change the result, or matching the oracle proves nothing.
  const npy::Array q = RandomTensor(npy::Dtype::kF32, {1, 9, 2, 8}, 7);
  const npy::Array k = RandomTensor(npy::Dtype::kF32, {1, 9, 2, 8}, 8);
  const npy::Array v = RandomTensor(npy::Dtype::kF32, {1, 9, 2, 8}, 9);
  npy::Write(Path("q.npy"), q);
  npy::Write(Path("k.npy"), k);
  npy::Write(Path("v.npy"), v);
  const auto [o_causal, lse_causal] = Oracle(q, k, v, {.causal = true});
  ASSERT_EQ(
      Run({"run", "--q", Path("q.npy"), "--k", Path("k.npy"), "--v", Path("v.npy"), "--out", Path("o.npy")})
          .status,
      0);
  EXPECT_GT(RelativeError(npy::Read(Path("o.npy")), o_causal), 1e-2);
}

TEST_F(CliTest, RunComputesFloat16InputsToFloat16Output) {
  const npy::Array q = RandomTensor(npy::Dtype::kF16, {1, 45, 2, 40}, 10);
  const npy::Array k = RandomTensor(npy::Dtype::kF16, {1, 45, 2, 40}, 11);
  const npy::Array v = RandomTensor(npy::Dtype::kF16, {1, 45, 2, 40}, 12);
  npy::Write(Path("q.npy"), q);
  npy::Write(Path("k.npy"), k);
  npy::Write(Path("v.npy"), v);
  const auto [o_ref, lse_ref] = Oracle(q, k, v, {.causal = true});
  const Outcome outcome = Run({"run", "--q", Path("q.npy"), "--k", Path("k.npy"), "--v", Path("v.npy"),
                               "--out", Path("o.npy"), "--lse", Path("lse.npy"), "--causal"});
  ASSERT_EQ(outcome.status, 0) << outcome.err;
  const npy::Array o = npy::Read(Path("o.npy"));
  EXPECT_EQ(o.dtype(), npy::Dtype::kF16);
  // float16 keeps 11 significant bits: the output may differ from the rounded oracle by an ulp (2^-10
  // relative).
  EXPECT_LE(RelativeError(o, o_ref), 2e-3);
  EXPECT_LE(RelativeError(npy::Read(Path("lse.npy")), lse_ref), 1e-5);
}

TEST_F(CliTest, RunWithEmptySequencesWritesEmptyOutputs) {
  npy::Write(Path("q.npy"), npy::Array(npy::Dtype::kF32, {2, 0, 3, 8}));
  npy::Write(Path("k.npy"), npy::Array(npy::Dtype::kF32, {2, 5, 3, 8}));
  npy::Write(Path("v.npy"), npy::Array(npy::Dtype::kF32, {2, 5, 3, 4}));
  const Outcome outcome = Run({"run", "--q", Path("q.npy"), "--k", Path("k.npy"), "--v", Path("v.npy"),
                               "--out", Path("o.npy"), "--lse", Path("lse.npy")});
  ASSERT_EQ(outcome.status, 0) << outcome.err;
  EXPECT_EQ(npy::Read(Path("o.npy")).shape(), (std::vector<std::int64_t>{2, 0, 3, 4}));
  EXPECT_EQ(npy::Read(Path("lse.npy")).shape(), (std::vector<std::int64_t>{2, 3, 0}));
}

TEST_F(CliTest, RunReplacesAnExistingOutputOnSuccess) {
  npy::Write(Path("q.npy"), RandomTensor(npy::Dtype::kF32, {1, 3, 1, 4}, 13));
  npy::Write(Path("k.npy"), RandomTensor(npy::Dtype::kF32, {1, 3, 1, 4}, 14));
  npy::Write(Path("v.npy"), RandomTensor(npy::Dtype::kF32, {1, 3, 1, 4}, 15));
  std::ofstream(Path("o.npy")) << "old contents";
  ASSERT_EQ(
      Run({"run", "--q", Path("q.npy"), "--k", Path("k.npy"), "--v", Path("v.npy"), "--out", Path("o.npy")})
          .status,
      0);
  EXPECT_EQ(npy::Read(Path("o.npy")).shape(), (std::vector<std::int64_t>{1, 3, 1, 4}));
  EXPECT_EQ(WorkFiles(), (std::set<std::string>{"q.npy", "k.npy", "v.npy", "o.npy"}));
}

// One rejected command line: its arguments (after "run") and a part of the expected error message.
struct Rejected {
  std::vector<std::string> args;
  std::string message;
};

TEST_F(CliTest, RunRejectsBadInputWithOneLineAndNoOutputFile) {
  const auto f32 = npy::Dtype::kF32;
  const std::vector<std::pair<std::string, npy::Array>> files = {
      {"q.npy", RandomTensor(f32, {2, 7, 4, 8}, 1)},
      {"k.npy", RandomTensor(f32, {2, 9, 2, 8}, 2)},
      {"v.npy", RandomTensor(f32, {2, 9, 2, 8}, 3)},
      {"q_rank3.npy", RandomTensor(f32, {2, 7, 32}, 4)},
      {"k_batch3.npy", RandomTensor(f32, {3, 9, 2, 8}, 5)},
      {"k_heads3.npy", RandomTensor(f32, {2, 9, 3, 8}, 6)},
      {"v_heads3.npy", RandomTensor(f32, {2, 9, 3, 8}, 6)},
      {"k_dim16.npy", RandomTensor(f32, {2, 9, 2, 16}, 7)},
      {"v_len8.npy", RandomTensor(f32, {2, 8, 2, 8}, 8)},
      {"k_f16.npy", RandomTensor(npy::Dtype::kF16, {2, 9, 2, 8}, 9)},
      {"q_f64.npy", npy::Array(npy::Dtype::kF64, {2, 7, 4, 8})},
      {"q_noheads.npy", npy::Array(f32, {2, 7, 0, 8})},
      {"slopes3.npy", npy::Array(f32, {3})},
  };
  for (const auto& [name, array] : files) npy::Write(Path(name), array);
  {
    const std::string bytes = npy::Encode(RandomTensor(f32, {2, 7, 4, 8}, 1));
    std::ofstream(Path("q_truncated.npy"), std::ios::binary) << bytes.substr(0, bytes.size() - 3);
    std::ofstream(Path("q_text.npy")) << "not an array\n";
    // One defect each in an otherwise valid file's header (same length, so the data offset is unchanged).
    auto with_header = [&](const std::string& name, const std::string& from, const std::string& to) {
      std::string text = npy::Encode(RandomTensor(f32, {2, 9, 2, 8}, 3));
      text.replace(text.find(from), from.size(), to);
      std::ofstream(Path(name), std::ios::binary) << text;
    };
    with_header("v_fortran.npy", "'fortran_order': False", " 'fortran_order': True");
    with_header("v_int32.npy", "'<f4'", "'<i4'");
    with_header("v_bad_key.npy", "'shape'", "'shapz'");
    with_header("v_bad_shape.npy", "'shape': (", "'shape': [");
  }
  auto with = [&](std::string q, std::string k, std::string v, std::vector<std::string> extra) {
    std::vector<std::string> args = {"run",   "--q",   Path(q),       "--k",   Path(k),        "--v",
                                     Path(v), "--out", Path("o.npy"), "--lse", Path("lse.npy")};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const std::vector<Rejected> cases = {
      {with("q_rank3.npy", "k.npy", "v.npy", {}), "--q: "},
      {with("q.npy", "k_batch3.npy", "v.npy", {}), "batch sizes differ"},
      {with("q.npy", "k_heads3.npy", "v_heads3.npy", {}),
       "query heads 4 must be a multiple of key/value heads 3"},
      {with("q.npy", "k_dim16.npy", "v.npy", {}), "--q, --k: head dims differ"},
      {with("q.npy", "k.npy", "v_len8.npy", {}), "--k, --v: sequence lengths differ"},
      {with("q.npy", "k.npy", "v_heads3.npy", {}), "--k, --v: head counts differ"},
      {with("q.npy", "k_f16.npy", "v.npy", {}), "dtypes must agree"},
      {with("q_f64.npy", "k.npy", "v.npy", {}), "--q: "},
      {with("q_noheads.npy", "k.npy", "v.npy", {}), "--q: "},
      {with("q_truncated.npy", "k.npy", "v.npy", {}), "--q: " + Path("q_truncated.npy") + ": truncated"},
      {with("q_text.npy", "k.npy", "v.npy", {}), "--q: " + Path("q_text.npy") + ": bad magic"},
      {with("missing.npy", "k.npy", "v.npy", {}), "--q: " + Path("missing.npy") + ": cannot open"},
      {with("q.npy", "k.npy", "v_fortran.npy", {}),
       "--v: " + Path("v_fortran.npy") + ": Fortran-order arrays"},
      {with("q.npy", "k.npy", "v_int32.npy", {}),
       "--v: " + Path("v_int32.npy") + ": unsupported dtype '<i4'"},
      {with("q.npy", "k.npy", "v_bad_key.npy", {}),
       "--v: " + Path("v_bad_key.npy") + ": bad header: unexpected key 'shapz'"},
      {with("q.npy", "k.npy", "v_bad_shape.npy", {}),
       "--v: " + Path("v_bad_shape.npy") + ": bad header: expected '(' at offset 50, found '['"},
      {with("q.npy", "k.npy", "v.npy", {"--alibi", Path("v_fortran.npy")}),
       "--alibi: " + Path("v_fortran.npy") + ": Fortran-order arrays"},
      {with("q.npy", "missing.npy", "v.npy", {}), "--k: "},
      {with("q.npy", "k.npy", "missing.npy", {}), "--v: "},
      {with("q.npy", "k.npy", "v.npy", {"--window", "-2", "0"}), "--window"},
      {with("q.npy", "k.npy", "v.npy", {"--window", "0", "-7"}), "--window"},
      {with("q.npy", "k.npy", "v.npy", {"--window", "3"}), "--window"},
      {with("q.npy", "k.npy", "v.npy", {"--softcap", "-1"}), "--softcap"},
      {with("q.npy", "k.npy", "v.npy", {"--softcap", "nan"}), "--softcap"},
      {with("q.npy", "k.npy", "v.npy", {"--softcap", "inf"}), "--softcap"},
      {with("q.npy", "k.npy", "v.npy", {"--scale", "inf"}), "--scale"},
      {with("q.npy", "k.npy", "v.npy", {"--scale", "nan"}), "--scale"},
      {with("q.npy", "k.npy", "v.npy", {"--scale", "1e39"}), "--scale"},  // finite double, infinite float
      {with("q.npy", "k.npy", "v.npy", {"--scale", "abc"}), "--scale"},
      {with("q.npy", "k.npy", "v.npy", {"--algorithm", "bogus"}), "--algorithm"},
      {with("q.npy", "k.npy", "v.npy", {"--threads", "-1"}), "--threads: must be in [0, 1024]"},
      {with("q.npy", "k.npy", "v.npy", {"--threads", "5000"}),
       "--threads: must be in [0, 1024] (0 = all cores), got 5000"},
      {with("q.npy", "k.npy", "v.npy", {"--alibi", Path("slopes3.npy")}), "--alibi"},
      {with("q.npy", "k.npy", "v.npy", {"--alibi", Path("missing.npy")}), "--alibi"},
      {with("q.npy", "k.npy", "v.npy", {"--frobnicate"}), "--frobnicate"},
      {{"run", "--k", Path("k.npy"), "--v", Path("v.npy"), "--out", Path("o.npy")}, "--q"},
      {{"run", "--q", Path("q.npy"), "--k", Path("k.npy"), "--v", Path("v.npy"), "--out", Path("o.npy"),
        "--lse", Path("o.npy")},
       "--lse"},
      {{"run", "--q", Path("q.npy"), "--k", Path("k.npy"), "--v", Path("v.npy"), "--out", Path("o.npy"),
        "--lse", Path("no_such_dir/lse.npy")},
       "--lse: "},
  };
  const std::set<std::string> inputs = WorkFiles();
  for (const Rejected& rejected : cases) {
    std::string line;
    for (const std::string& arg : rejected.args) line += arg + " ";
    SCOPED_TRACE(line);
    for (bool outputs_exist : {false, true}) {
      if (outputs_exist) {
        std::ofstream(Path("o.npy")) << "precious O";
        std::ofstream(Path("lse.npy")) << "precious LSE";
      }
      const Outcome outcome = Run(rejected.args);
      EXPECT_NE(outcome.status, 0);
      EXPECT_EQ(outcome.err.rfind("flashattn: error: ", 0), 0u) << outcome.err;
      EXPECT_EQ(std::count(outcome.err.begin(), outcome.err.end(), '\n'), 1) << outcome.err;
      EXPECT_NE(outcome.err.find(rejected.message), std::string::npos) << outcome.err;
      if (outputs_exist) {
        EXPECT_EQ(ReadText(Path("o.npy")), "precious O");
        EXPECT_EQ(ReadText(Path("lse.npy")), "precious LSE");
        fs::remove(Path("o.npy"));
        fs::remove(Path("lse.npy"));
      }
      EXPECT_EQ(WorkFiles(), inputs);  // no output and no temporary file left behind
    }
  }
}

TEST_F(CliTest, NoSubcommandIsAOneLineError) {
  const Outcome outcome = Run({});
  EXPECT_NE(outcome.status, 0);
  EXPECT_EQ(outcome.err.rfind("flashattn: error: ", 0), 0u) << outcome.err;
  EXPECT_EQ(std::count(outcome.err.begin(), outcome.err.end(), '\n'), 1) << outcome.err;
}

// `flashattn bench` with each mode's shape options on the command line: one JSON row per call that carries
// them (a tiny configuration, no baseline); a bad value is a one-line error that names its option.
TEST_F(CliTest, BenchTakesEachModesOptionsFromTheCommandLine) {
#ifndef FLASHATTN_WITH_BENCH
  GTEST_SKIP() << "built without `flashattn bench` (FLASHATTN_ENABLE_BENCH=OFF, as in the sanitizer builds)";
#endif
  const std::vector<std::string> common = {"bench", "--json", "--threads", "1", "--repeats", "1",
                                           "--min-time", "0", "--no-baseline", "--batch", "2",
                                           "--heads", "4", "--heads-kv", "2", "--headdim", "24"};
  const auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), common.begin(), common.end());
    const Outcome outcome = Run(args);
    EXPECT_EQ(outcome.status, 0) << outcome.err;
    EXPECT_EQ(std::count(outcome.out.begin(), outcome.out.end(), '\n'), 1) << outcome.out;
    return outcome.out;
  };
  const auto has = [](const std::string& json, const std::string& field) {
    EXPECT_NE(json.find(field), std::string::npos) << field << " not in " << json;
  };
  const std::string forward = run({"--mode", "forward", "--seqlen", "33", "--seqlen-k", "17", "--causal",
                                   "--dtype", "bf16"});
  for (const char* field : {"\"mode\": \"forward\"", "\"batch\": 2", "\"heads\": 4", "\"heads_kv\": 2",
                            "\"seqlen_q\": 33", "\"seqlen_k\": 17", "\"headdim\": 24", "\"causal\": true",
                            "\"dtype\": \"bf16\"", "\"threads\": 1", "\"speedup_vs_baseline\": null"})
    has(forward, field);
  const std::string decode = run({"--mode", "decode", "--cache-len", "100", "--num-splits", "3", "--paged", "7",
                                  "--dtype", "f16"});
  for (const char* field : {"\"mode\": \"decode\"", "\"seqlen_q\": 1", "\"cache_len\": 100",
                            "\"num_splits\": 3", "\"page_size\": 7", "\"dtype\": \"f16\"",
                            "\"bytes_read\": 39168", "\"bandwidth_fraction\": ", "\"roofline_fraction\": ",
                            "\"int8_dot_peak_gops\": "})
    has(decode, field);
  // Two rounds: a row per round, then the case's summary over the rounds (forward: a decode run measures the
  // bandwidth before each round, which takes seconds on a machine with a large L3).
  std::vector<std::string> rounds_args = common;
  for (const char* arg : {"--mode", "forward", "--seqlen", "33", "--rounds", "2"}) rounds_args.push_back(arg);
  const Outcome rounds = Run(rounds_args);
  EXPECT_EQ(rounds.status, 0) << rounds.err;
  EXPECT_EQ(std::count(rounds.out.begin(), rounds.out.end(), '\n'), 3) << rounds.out;
  for (const char* field : {"\"round\": 1", "\"round\": 2", "\"summary\": true", "\"rounds\": 2",
                            "\"median_ms_per_round\": [", "\"median_roofline_fraction\": null"})
    has(rounds.out, field);
  const std::string backward = run({"--mode", "backward", "--seqlen", "20", "--seqlen-k", "31"});
  for (const char* field : {"\"mode\": \"backward\"", "\"seqlen_q\": 20", "\"seqlen_k\": 31",
                            "\"causal\": false", "\"dtype\": \"f32\""})
    has(backward, field);
  // Serve takes no --batch: its sequences are --decoding's and --prefilling's (3 + 1 here, 3 + 9 query rows).
  const Outcome serve = Run({"bench", "--json", "--threads", "1", "--repeats", "1", "--min-time", "0", "--heads", "4",
                             "--heads-kv", "2", "--headdim", "24", "--mode", "serve", "--decoding", "3:10:40",
                             "--prefilling", "1:9:20", "--dtype", "bf16"});
  EXPECT_EQ(serve.status, 0) << serve.err;
  for (const char* field : {"\"mode\": \"serve\"", "\"causal\": true", "\"decoding_seqs\": 3",
                            "\"prefill_chunk\": 9", "\"prefill_prefix\": 20", "\"query_rows\": 12",
                            "\"tokens_per_second\": ", "\"roofline_fraction\": ", "\"page_size\": 16"})
    has(serve.out, field);
  const Outcome bad_serve = Run({"bench", "--mode", "serve", "--decoding", "4:9:3"});
  EXPECT_NE(bad_serve.status, 0);
  EXPECT_EQ(std::count(bad_serve.err.begin(), bad_serve.err.end(), '\n'), 1) << bad_serve.err;
  EXPECT_NE(bad_serve.err.find("--decoding"), std::string::npos) << bad_serve.err;
  EXPECT_NE(bad_serve.err.find("4:9:3"), std::string::npos) << bad_serve.err;
  // Over an int8 cache in groups of 8 features with integer scores; integer P̃V over an FP8 cache is refused.
  const Outcome quantized_serve = Run({"bench", "--json", "--threads", "1", "--repeats", "1", "--min-time", "0",
                                       "--warm-cache", "--heads", "4", "--heads-kv", "2", "--headdim", "24",
                                       "--mode", "serve", "--decoding", "2:10:40", "--prefilling", "1:5:20",
                                       "--cache-dtype", "int8", "--scale-group-size", "8", "--quantize-query"});
  EXPECT_EQ(quantized_serve.status, 0) << quantized_serve.err;
  for (const char* field : {"\"mode\": \"serve\"", "\"cache_dtype\": \"int8\"", "\"scale_group_size\": 8",
                            "\"quantize_query_int8\": true", "\"query_rows\": 7", "\"roofline_fraction\": "})
    has(quantized_serve.out, field);
  const Outcome bad_quantized_serve = Run({"bench", "--mode", "serve", "--decoding", "2:10:40", "--cache-dtype",
                                           "fp8_e4m3", "--quantize-probs"});
  EXPECT_NE(bad_quantized_serve.status, 0);
  EXPECT_EQ(std::count(bad_quantized_serve.err.begin(), bad_quantized_serve.err.end(), '\n'), 1)
      << bad_quantized_serve.err;
  for (const char* named : {"--quantize-probs", "fp8_e4m3"})
    EXPECT_NE(bad_quantized_serve.err.find(named), std::string::npos) << bad_quantized_serve.err;

  const Outcome bad = Run({"bench", "--mode", "sideways", "--no-baseline"});
  EXPECT_NE(bad.status, 0);
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  EXPECT_NE(bad.err.find("--mode"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("sideways"), std::string::npos) << bad.err;
  const Outcome bad_range = Run({"bench", "--mode", "decode", "--cache-len", "9:3", "--no-baseline"});
  EXPECT_NE(bad_range.status, 0);
  EXPECT_EQ(std::count(bad_range.err.begin(), bad_range.err.end(), '\n'), 1) << bad_range.err;
  EXPECT_NE(bad_range.err.find("--cache-len"), std::string::npos) << bad_range.err;
  EXPECT_NE(bad_range.err.find("9:3"), std::string::npos) << bad_range.err;
  const Outcome preset_with_shape = Run({"bench", "--preset", "decode-roofline", "--heads", "4"});
  EXPECT_NE(preset_with_shape.status, 0);
  EXPECT_NE(preset_with_shape.err.find("--preset"), std::string::npos) << preset_with_shape.err;
}

TEST_F(CliTest, DemoPrintsARowPerAlgorithmAndPassesTheOracleCheck) {
  for (const std::string causal : {"--causal", "--no-causal"}) {
    const Outcome outcome = Run(
        {"demo", "--batch", "2", "--heads", "2", "--seqlen", "67", "--headdim", "24", causal, "--rows", "5"});
    ASSERT_EQ(outcome.status, 0) << outcome.err;
    EXPECT_EQ(outcome.err, "");
    EXPECT_NE(outcome.out.find("GFLOP/s"), std::string::npos) << outcome.out;
    EXPECT_NE(outcome.out.find("over 20 rows recomputed in float64"), std::string::npos) << outcome.out;
    for (Algorithm algorithm : kAllAlgorithms) {
      const bool listed =
          outcome.out.find("\n" + std::string(to_string(algorithm)) + " ") != std::string::npos;
      EXPECT_EQ(listed, algorithm != Algorithm::kOracle) << to_string(algorithm) << "\n" << outcome.out;
    }
  }
}

TEST_F(CliTest, DemoFailsWhenAnAlgorithmMissesTheTolerance) {
  // No float32 algorithm matches float64 to 1e-30 on random data: the check must be able to fail.
  const Outcome outcome =
      Run({"demo", "--heads", "1", "--seqlen", "33", "--headdim", "8", "--tolerance", "1e-30"});
  EXPECT_NE(outcome.status, 0);
  EXPECT_EQ(outcome.err.rfind("flashattn: error: demo: differs from the float64 oracle", 0), 0u)
      << outcome.err;
  EXPECT_EQ(std::count(outcome.err.begin(), outcome.err.end(), '\n'), 1) << outcome.err;
}

TEST_F(CliTest, DemoRejectsBadWorkloads) {
  for (const auto& [option, value] : std::vector<std::pair<std::string, std::string>>{{"--seqlen", "0"},
                                                                                      {"--heads", "-1"},
                                                                                      {"--headdim", "100000"},
                                                                                      {"--batch", "0"},
                                                                                      {"--threads", "-2"}}) {
    SCOPED_TRACE(option + " " + value);
    const Outcome outcome = Run({"demo", option, value});
    EXPECT_NE(outcome.status, 0);
    EXPECT_EQ(outcome.err.rfind("flashattn: error: " + option, 0), 0u) << outcome.err;
    EXPECT_EQ(std::count(outcome.err.begin(), outcome.err.end(), '\n'), 1) << outcome.err;
  }
}

}  // namespace
}  // namespace flashattn::testing
