#include "kiln/core/npy.h"

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(NpyTest, RoundTripsEveryNumericDtype) {
  const std::string path = ::testing::TempDir() + "/t.npy";
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8, DType::kInt32,
                  DType::kInt64, DType::kBool, DType::kFloat16}) {
    Tensor t = Tensor::Zeros(d, Shape{2, 3});
    static_cast<uint8_t*>(t.raw_data())[0] = 1;
    ASSERT_TRUE(WriteNpy(path, t).ok());
    auto back = ReadNpy(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(TensorsEqual(*back, t)) << DTypeName(d);
  }
}

TEST(NpyTest, ScalarAndVectorShapes) {
  auto bytes = SerializeNpy(Tensor::Scalar<float>(3.5f));
  ASSERT_TRUE(bytes.ok());
  EXPECT_NE(bytes->find("'shape': ()"), std::string::npos);
  auto v = SerializeNpy(Tensor::FromVector<float>({1, 2}));
  EXPECT_NE(v->find("'shape': (2,)"), std::string::npos);
  EXPECT_EQ((v->find("\n") + 1) % 64, 0u);  // data starts 64-byte aligned
}

TEST(NpyTest, TruncatedDataNamesTheFileAndSizes) {
  auto bytes = SerializeNpy(Tensor::Zeros(DType::kFloat32, Shape{10}));
  std::string cut = bytes->substr(0, bytes->size() - 4);
  auto t = ParseNpy(cut, "x.npy");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("x.npy"), std::string::npos);
  EXPECT_NE(t.status().message().find("truncated"), std::string::npos);
}

TEST(NpyTest, StringsRoundTripAsFixedWidthBytes) {
  Tensor t(DType::kString, Shape{2, 2});
  t.data<std::string>()[0] = "a";
  t.data<std::string>()[1] = std::string("bin\0ary\x01", 8);
  t.data<std::string>()[2] = "";
  t.data<std::string>()[3] = "longest one";
  auto bytes = SerializeNpy(t);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_NE(bytes->find("'descr': '|S11'"), std::string::npos);
  auto back = ParseNpy(*bytes, "strings.npy");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape(), (Shape{2, 2}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back->data<std::string>()[i], t.data<std::string>()[i]);
  auto cut = ParseNpy(bytes->substr(0, bytes->size() - 1), "strings.npy");
  EXPECT_FALSE(cut.ok());
}

TEST(NpyTest, RejectsBadMagic) {
  auto t = ParseNpy("hello world, not numpy", "bad.npy");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("bad magic"), std::string::npos);
}

// A header is just text: it can claim any shape. Nothing is allocated for a claim the data
// does not back, and a count that wraps around is refused rather than taken as empty.
std::string NpyWithShape(const std::string& shape, size_t data_bytes) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(data_bytes, '\0');
  return out;
}

TEST(NpyTest, HeaderThatLiesAboutItsShapeIsAnError) {
  auto big = ParseNpy(NpyWithShape("(536870912, 16)", 64), "big.npy");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("truncated"), std::string::npos) << big.status();
  auto wraps = ParseNpy(NpyWithShape("(4611686018427387904, 4611686018427387904)", 0), "wrap.npy");
  ASSERT_FALSE(wraps.ok());
  EXPECT_NE(wraps.status().message().find("63 bits"), std::string::npos) << wraps.status();
  auto bytes_wrap = ParseNpy(NpyWithShape("(4611686018427387904,)", 0), "bytes.npy");
  ASSERT_FALSE(bytes_wrap.ok());
  auto fine = ParseNpy(NpyWithShape("(2, 2)", 16), "fine.npy");
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(fine->shape(), (Shape{2, 2}));
}

}  // namespace
}  // namespace kiln
