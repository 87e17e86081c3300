// The one CPU cache detection (src/common/cpu_caches.h): sysconf, then sysfs, then the defaults.
#include "common/cpu_caches.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace flashattn {
namespace {

namespace fs = std::filesystem;

// A cache directory laid out like /sys/devices/system/cpu/cpu0/cache, built under the test's temp dir.
class FakeSysfs {
 public:
  explicit FakeSysfs(const std::string& name) : dir_(fs::path(::testing::TempDir()) / name) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~FakeSysfs() { fs::remove_all(dir_); }

  void Add(int index, const std::string& level, const std::string& type, const std::string& size) {
    const fs::path entry = dir_ / ("index" + std::to_string(index));
    fs::create_directories(entry);
    std::ofstream(entry / "level") << level << "\n";
    std::ofstream(entry / "type") << type << "\n";
    std::ofstream(entry / "size") << size << "\n";
  }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
};

TEST(CpuCaches, ReadsTheDataOrUnifiedCacheOfEachLevelFromSysfs) {
  FakeSysfs sysfs("cpu_caches_zen4");
  sysfs.Add(0, "1", "Data", "32K");
  sysfs.Add(1, "1", "Instruction", "32K");
  sysfs.Add(2, "2", "Unified", "1024K");
  sysfs.Add(3, "3", "Unified", "32768K");
  const CpuCaches caches = DetectCpuCaches(/*ask_sysconf=*/false, sysfs.dir());
  EXPECT_EQ(caches.l2.bytes, std::int64_t{1} << 20);
  EXPECT_EQ(caches.l2.source, CacheSizeSource::kSysfs);
  EXPECT_EQ(caches.l3.bytes, std::int64_t{32} << 20);
  EXPECT_EQ(caches.l3.source, CacheSizeSource::kSysfs);
  EXPECT_TRUE(caches.l2.detected());
}

TEST(CpuCaches, SkipsInstructionCachesUnreadableSizesAndMissingIndices) {
  FakeSysfs sysfs("cpu_caches_odd");
  sysfs.Add(1, "2", "Instruction", "64K");  // index0 missing; an L2 instruction cache is not the L2
  sysfs.Add(2, "2", "Data", "unknown");     // unreadable: the next entry of the level counts
  sysfs.Add(5, "2", "Data", "2M");
  sysfs.Add(6, "3", "Unified", "268435456");  // plain bytes
  const CpuCaches caches = DetectCpuCaches(/*ask_sysconf=*/false, sysfs.dir());
  EXPECT_EQ(caches.l2.bytes, std::int64_t{2} << 20);
  EXPECT_EQ(caches.l3.bytes, std::int64_t{256} << 20);
}

TEST(CpuCaches, FallsBackToTheDocumentedDefaults) {
  const CpuCaches caches = DetectCpuCaches(/*ask_sysconf=*/false, "/nonexistent/cpu0/cache");
  EXPECT_EQ(caches.l2.bytes, kDefaultL2Bytes);
  EXPECT_EQ(caches.l3.bytes, kDefaultL3Bytes);
  EXPECT_EQ(caches.l2.source, CacheSizeSource::kDefault);
  EXPECT_FALSE(caches.l2.detected());
  EXPECT_FALSE(caches.l3.detected());

  FakeSysfs sysfs("cpu_caches_l2_only");
  sysfs.Add(0, "2", "Unified", "512K");
  const CpuCaches partial = DetectCpuCaches(/*ask_sysconf=*/false, sysfs.dir());
  EXPECT_EQ(partial.l2.source, CacheSizeSource::kSysfs);
  EXPECT_EQ(partial.l3.source, CacheSizeSource::kDefault);
  EXPECT_EQ(partial.l3.bytes, kDefaultL3Bytes);
}

// sysconf comes first: where glibc answers, its size wins over sysfs.
TEST(CpuCaches, SysconfComesBeforeSysfs) {
  FakeSysfs sysfs("cpu_caches_sysfs_differs");
  sysfs.Add(0, "2", "Unified", "3K");
  sysfs.Add(1, "3", "Unified", "5K");
  const CpuCaches caches = DetectCpuCaches(/*ask_sysconf=*/true, sysfs.dir());
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE), l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  EXPECT_EQ(caches.l2.bytes, l2 > 0 ? l2 : 3 << 10);
  EXPECT_EQ(caches.l2.source, l2 > 0 ? CacheSizeSource::kSysconf : CacheSizeSource::kSysfs);
  EXPECT_EQ(caches.l3.bytes, l3 > 0 ? l3 : 5 << 10);
}

TEST(CpuCaches, DetectedOnceFromThisMachine) {
  const CpuCaches& caches = DetectedCpuCaches();
  EXPECT_EQ(&caches, &DetectedCpuCaches());
  const CpuCaches again = DetectCpuCaches(/*ask_sysconf=*/true, "/sys/devices/system/cpu/cpu0/cache");
  EXPECT_EQ(caches.l2.bytes, again.l2.bytes);
  EXPECT_EQ(caches.l3.bytes, again.l3.bytes);
  EXPECT_GT(caches.l2.bytes, 0);
  EXPECT_GT(caches.l3.bytes, 0);
}

}  // namespace
}  // namespace flashattn
