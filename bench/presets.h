// Named lists of cases for `flashattn bench --preset NAME`: fixed shapes whose rows compare from run to run.
// A preset's cases run on its thread count unless --threads gives one; the other run options (--rounds,
// --repeats, --json, --seed of drawn cache lengths ...) apply as they do to any case.
#ifndef FLASHATTN_BENCH_PRESETS_H_
#define FLASHATTN_BENCH_PRESETS_H_

#include <span>
#include <string>
#include <string_view>

#include "bench/bench_case.h"

namespace flashattn::bench {

struct Preset {
  std::string_view name;
  std::string_view description;
  int threads = 2;
  bool baseline = false;  // whether the OpenBLAS baseline runs beside each case
  std::span<const BenchCase> cases;  // their threads are set when planned
};

// Every preset, in the order --help lists them.
std::span<const Preset> Presets();

// The preset called `name`; throws Error naming `argument`, the name and the presets there are otherwise.
const Preset& FindPreset(std::string_view name, std::string_view argument = "--preset");

// "decode-roofline (...), ...": the presets' names and descriptions, for --help.
std::string DescribePresets();

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_PRESETS_H_
