// The .npy reader and writer (cli/npy.h): round trips of every dtype over shapes with zero-length and
// single dimensions, files written the way NumPy writes them (format 1.0, 2.0, 3.0), and every kind of
// malformed file rejected with a message that names the file and the problem.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "npy.h"

namespace flashattn::npy {
namespace {

// A .npy file as NumPy lays it out: magic, version, little-endian header length, header, data.
std::string MakeFile(const std::string& header, const std::string& data, int major = 1, int minor = 0) {
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back(static_cast<char>(minor));
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  for (std::size_t i = 0; i < length_bytes; ++i)
    out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return out + header + data;
}

std::string Floats(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

// Fills an array with distinct bit patterns, so that any misplaced byte changes the comparison.
void FillPattern(Array& array) {
  auto* bytes = static_cast<unsigned char*>(array.data());
  for (std::int64_t i = 0; i < array.NumBytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
  if (array.dtype() == Dtype::kBool) {
    for (std::int64_t i = 0; i < array.NumBytes(); ++i) bytes[i] &= 1;
  }
}

void ExpectSameArray(const Array& a, const Array& b) {
  EXPECT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.NumBytes(), b.NumBytes());
  if (a.NumBytes() > 0) EXPECT_EQ(std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.NumBytes())), 0);
}

TEST(NpyRoundTrip, EveryDtypeAndShapeSurvivesEncodeDecode) {
  const std::vector<std::vector<std::int64_t>> shapes = {
      {}, {0}, {1}, {7}, {2, 0, 5}, {0, 0}, {3, 4}, {2, 3, 4, 5}, {1, 1, 1, 1}, {2, 5, 3, 0}};
  for (Dtype dtype : {Dtype::kF32, Dtype::kF16, Dtype::kF64, Dtype::kU8, Dtype::kBool}) {
    for (const auto& shape : shapes) {
      SCOPED_TRACE(std::string(Descr(dtype)) + " " + ShapeString(shape));
      Array array(dtype, shape);
      FillPattern(array);
      const std::string bytes = Encode(array);
      ExpectSameArray(Decode(bytes, "memory.npy"), array);
    }
  }
}

TEST(NpyRoundTrip, WrittenFileIsFormat10WithDataAlignedTo64Bytes) {
  Array array(Dtype::kF32, {2, 3});
  FillPattern(array);
  const std::string bytes = Encode(array);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t header_length =
      static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
  EXPECT_EQ((10 + header_length) % 64, 0u);
  EXPECT_EQ(bytes[10 + header_length - 1], '\n');
  EXPECT_EQ(bytes.size(), 10 + header_length + 24);
  EXPECT_NE(bytes.find("'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"), std::string::npos);
}

TEST(NpyRoundTrip, ThroughAFileOnDisk) {
  const std::string path = ::testing::TempDir() + "/npy_round_trip.npy";
  Array array(Dtype::kF16, {4, 1, 3});
  FillPattern(array);
  Write(path, array);
  ExpectSameArray(Read(path), array);
  std::filesystem::remove(path);
}

TEST(NpyRoundTrip, OneDimensionalShapeIsWrittenWithTrailingComma) {
  EXPECT_EQ(ShapeString({5}), "(5,)");
  EXPECT_EQ(ShapeString({}), "()");
  EXPECT_EQ(ShapeString({2, 3}), "(2, 3)");
}

TEST(NpyRead, AcceptsHeadersAsNumPyWritesThemInEveryVersion) {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  const std::string data = Floats(values);
  for (int major : {1, 2, 3}) {
    for (const std::string header : {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }          \n",
                                     "{\"shape\": (3,), \"descr\": \"<f4\", \"fortran_order\": False}\n",
                                     "{'descr':'<f4','fortran_order':False,'shape':(3 ,)}"}) {
      SCOPED_TRACE(std::to_string(major) + ": " + header);
      const Array array = Decode(MakeFile(header, data, major), "x.npy");
      ASSERT_EQ(array.dtype(), Dtype::kF32);
      ASSERT_EQ(array.shape(), std::vector<std::int64_t>{3});
      EXPECT_EQ(std::vector<float>(array.Data<float>(), array.Data<float>() + 3), values);
    }
  }
}

TEST(NpyRead, ScalarShapeHoldsOneElement) {
  const Array array = Decode(MakeFile("{'descr': '<f8', 'fortran_order': False, 'shape': (), }\n",
                                      std::string("\0\0\0\0\0\0\xf0\x3f", 8)),
                             "x.npy");
  EXPECT_EQ(array.NumElements(), 1);
  EXPECT_EQ(array.Data<double>()[0], 1.0);
}

TEST(NpyRead, TypedAccessMustMatchTheDtype) {
  Array array(Dtype::kF16, {2});
  EXPECT_NE(array.Data<std::uint16_t>(), nullptr);
  EXPECT_THROW(array.Data<float>(), NpyError);
}

// Decoding `bytes` in memory, and reading them from a file, must both fail with a message that starts with
// the file's name and contains `expected`.
void ExpectRejected(const std::string& bytes, const std::string& expected) {
  const std::string path = ::testing::TempDir() + "/bad.npy";
  {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << bytes;
  }
  for (bool from_file : {false, true}) {
    SCOPED_TRACE(from_file ? "Read" : "Decode");
    try {
      if (from_file)
        Read(path);
      else
        Decode(bytes, path);
      ADD_FAILURE() << "accepted a file that should fail with '" << expected << "'";
    } catch (const NpyError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
      EXPECT_NE(message.find(expected), std::string::npos)
          << "message: " << message << "\nexpected: " << expected;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
  std::filesystem::remove(path);
}

const std::string kGoodHeader = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n";
const std::string kSixFloats = Floats({1, 2, 3, 4, 5, 6});

TEST(NpyMalformed, GoodFileIsAcceptedSoTheCasesBelowTestOneDefectEach) {
  EXPECT_EQ(Decode(MakeFile(kGoodHeader, kSixFloats), "good.npy").NumElements(), 6);
}

TEST(NpyMalformed, TruncatedFiles) {
  const std::string good = MakeFile(kGoodHeader, kSixFloats);
  ExpectRejected("", "truncated");
  ExpectRejected("\x93NUM", "truncated");
  ExpectRejected(good.substr(0, 7), "truncated");
  ExpectRejected(good.substr(0, 9), "truncated: the file ends inside the header length");
  ExpectRejected(good.substr(0, 30), "truncated: the header is");
  ExpectRejected(good.substr(0, good.size() - 1),
                 "truncated: shape (2, 3) of '<f4' needs 24 data bytes but the file has 23");
  ExpectRejected(MakeFile(kGoodHeader, ""),
                 "truncated: shape (2, 3) of '<f4' needs 24 data bytes but the file has 0");
}

TEST(NpyMalformed, TrailingData) {
  ExpectRejected(MakeFile(kGoodHeader, kSixFloats + "x"),
                 "trailing data: shape (2, 3) of '<f4' needs 24 data bytes but the file has 25");
}

TEST(NpyMalformed, BadMagic) {
  ExpectRejected("PK\x03\x04 this is a zip file", "bad magic");
  ExpectRejected("\x93NUMPZ\x01\x00", "bad magic");
  ExpectRejected("\x93numpy\x01\x00", "bad magic");
}

TEST(NpyMalformed, BadVersion) {
  ExpectRejected(MakeFile(kGoodHeader, kSixFloats, 4, 0), "unsupported format version 4.0");
  ExpectRejected(MakeFile(kGoodHeader, kSixFloats, 0, 0), "unsupported format version 0.0");
  ExpectRejected(MakeFile(kGoodHeader, kSixFloats, 1, 1), "unsupported format version 1.1");
}

TEST(NpyMalformed, BadHeaders) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "expected '{' but the header ends"},
      {"[1, 2]", "expected '{'"},
      {"{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"},
      {"{'descr': '<f4', 'shape': (2, 3)}", "missing key 'fortran_order'"},
      {"{'fortran_order': False, 'shape': (2, 3)}", "missing key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}", "unexpected key 'extra'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",
       "key 'descr' appears twice"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3)}", "'descr' must be a string"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}", "'fortran_order' must be True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}",
       "'shape' must be a tuple of non-negative integers"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", "expected '('"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", "expected ','"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", "expected '}' but the header ends"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3)}", "expected '}' at offset"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3)}", "expected ':'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} junk",
       "unexpected text after the closing '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
       "a dimension of 'shape' does not fit in 64 bits"},
      {"{'descr': '\\x3cf4', 'fortran_order': False, 'shape': (2, 3)}", "escape sequences"},
      {"{'descr", "unterminated string"},
  };
  for (const auto& [header, expected] : cases) {
    SCOPED_TRACE(header);
    ExpectRejected(MakeFile(header + "\n", kSixFloats), "bad header: " + expected);
  }
}

TEST(NpyMalformed, UnsupportedDtypes) {
  for (const std::string descr : {"<i4", "<f16", "<V2", "|O", "<c8", "f4"}) {
    SCOPED_TRACE(descr);
    ExpectRejected(
        MakeFile("{'descr': '" + descr + "', 'fortran_order': False, 'shape': (2, 3), }\n", kSixFloats),
        "unsupported dtype '" + descr + "'");
  }
  ExpectRejected(MakeFile("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }\n", kSixFloats),
                 "big-endian dtype '>f4' is not supported");
}

TEST(NpyMalformed, FortranOrder) {
  ExpectRejected(MakeFile("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", kSixFloats),
                 "Fortran-order arrays are not supported");
}

TEST(NpyMalformed, ShapeDoesNotMatchTheData) {
  ExpectRejected(MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 3), }\n", kSixFloats),
                 "truncated: shape (3, 3) of '<f4' needs 36 data bytes but the file has 24");
  ExpectRejected(MakeFile("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }\n", kSixFloats),
                 "trailing data: shape (2, 3) of '<f2' needs 12 data bytes but the file has 24");
  ExpectRejected(MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }\n", kSixFloats),
                 "trailing data");
}

TEST(NpyMalformed, ShapeWhoseSizeOverflows) {
  // 2^62 · 4 elements, and 2^61 float32 elements (2^63 bytes): neither fits in int64.
  ExpectRejected(
      MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }\n", ""),
      "is too large: its size overflows 64 bits");
  ExpectRejected(
      MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2305843009213693952,), }\n", ""),
      "is too large: its size overflows 64 bits");
  // A zero-length dimension does not excuse the others from overflowing.
  ExpectRejected(
      MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904, 4), }\n", ""),
      "is too large");
}

TEST(NpyMalformed, TooManyDimensions) {
  std::string shape = "(";
  for (int i = 0; i < 65; ++i) shape += "1, ";
  ExpectRejected(
      MakeFile("{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + "), }\n", Floats({1})),
      "more than 64 dimensions");
}

TEST(NpyReadFile, PipeIsReadWhole) {
  const std::string path = ::testing::TempDir() + "/npy_pipe_" + std::to_string(getpid());
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  Array array(Dtype::kF32, {3, 2});
  FillPattern(array);
  std::thread writer([&] { std::ofstream(path, std::ios::binary) << Encode(array); });
  const Array read = Read(path);
  writer.join();
  ExpectSameArray(read, array);
  std::filesystem::remove(path);
}

TEST(NpyReadFile, MissingFileIsNamedInTheError) {
  const std::string path = ::testing::TempDir() + "/does_not_exist.npy";
  try {
    Read(path);
    ADD_FAILURE() << "read a missing file";
  } catch (const NpyError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": cannot open: No such file or directory");
  }
}

TEST(NpyReadFile, DirectoryIsNotAFile) { EXPECT_THROW(Read(::testing::TempDir()), NpyError); }

TEST(NpyArray, NegativeOrOverflowingShapeIsRejected) {
  EXPECT_THROW(Array(Dtype::kF32, {2, -1}), NpyError);
  EXPECT_THROW(Array(Dtype::kF32, {std::int64_t{1} << 40, std::int64_t{1} << 40}), NpyError);
}

}  // namespace
}  // namespace flashattn::npy
