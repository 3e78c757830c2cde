// kiln::StringToHashBucketFast: TensorFlow's tf.strings.to_hash_bucket_fast, i.e.
// Fingerprint64(s) % num_buckets where Fingerprint64 is FarmHash's Fingerprint64 (the
// farmhashna Hash64 variant). Feature columns (categorical_column_with_hash_bucket) depend on
// bit-exact hashes: a different hash sends features to different embedding rows.
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kiln/kernels/kernel.h"
#include "kernels/cpu/tf_fingerprint.h"

namespace kiln::kernels {
namespace farmhash {
namespace {

constexpr uint64_t k0 = 0xc3a5c85c97cb3127ULL;
constexpr uint64_t k1 = 0xb492b66fbe98f273ULL;
constexpr uint64_t k2 = 0x9ae16a3b2f90404fULL;

inline uint64_t Fetch64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t Fetch32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t Rotate(uint64_t v, int shift) {
  return shift == 0 ? v : ((v >> shift) | (v << (64 - shift)));
}
inline uint64_t ShiftMix(uint64_t v) { return v ^ (v >> 47); }

inline uint64_t HashLen16(uint64_t u, uint64_t v, uint64_t mul) {
  uint64_t a = (u ^ v) * mul;
  a ^= (a >> 47);
  uint64_t b = (v ^ a) * mul;
  b ^= (b >> 47);
  b *= mul;
  return b;
}
inline uint64_t HashLen16(uint64_t u, uint64_t v) {
  return HashLen16(u, v, 0x9ddfea08eb382d69ULL);
}

uint64_t HashLen0to16(const char* s, size_t len) {
  if (len >= 8) {
    const uint64_t mul = k2 + len * 2;
    const uint64_t a = Fetch64(s) + k2;
    const uint64_t b = Fetch64(s + len - 8);
    const uint64_t c = Rotate(b, 37) * mul + a;
    const uint64_t d = (Rotate(a, 25) + b) * mul;
    return HashLen16(c, d, mul);
  }
  if (len >= 4) {
    const uint64_t mul = k2 + len * 2;
    const uint64_t a = Fetch32(s);
    return HashLen16(len + (a << 3), Fetch32(s + len - 4), mul);
  }
  if (len > 0) {
    const uint8_t a = static_cast<uint8_t>(s[0]);
    const uint8_t b = static_cast<uint8_t>(s[len >> 1]);
    const uint8_t c = static_cast<uint8_t>(s[len - 1]);
    const uint32_t y = static_cast<uint32_t>(a) + (static_cast<uint32_t>(b) << 8);
    const uint32_t z = static_cast<uint32_t>(len) + (static_cast<uint32_t>(c) << 2);
    return ShiftMix(y * k2 ^ z * k0) * k2;
  }
  return k2;
}

uint64_t HashLen17to32(const char* s, size_t len) {
  const uint64_t mul = k2 + len * 2;
  const uint64_t a = Fetch64(s) * k1;
  const uint64_t b = Fetch64(s + 8);
  const uint64_t c = Fetch64(s + len - 8) * mul;
  const uint64_t d = Fetch64(s + len - 16) * k2;
  return HashLen16(Rotate(a + b, 43) + Rotate(c, 30) + d, a + Rotate(b + k2, 18) + c, mul);
}

std::pair<uint64_t, uint64_t> WeakHashLen32WithSeeds(uint64_t w, uint64_t x, uint64_t y,
                                                     uint64_t z, uint64_t a, uint64_t b) {
  a += w;
  b = Rotate(b + a + z, 21);
  const uint64_t c = a;
  a += x;
  a += y;
  b += Rotate(a, 44);
  return {a + z, b + c};
}
std::pair<uint64_t, uint64_t> WeakHashLen32WithSeeds(const char* s, uint64_t a, uint64_t b) {
  return WeakHashLen32WithSeeds(Fetch64(s), Fetch64(s + 8), Fetch64(s + 16), Fetch64(s + 24), a,
                                b);
}

uint64_t HashLen33to64(const char* s, size_t len) {
  const uint64_t mul = k2 + len * 2;
  const uint64_t a = Fetch64(s) * k2;
  const uint64_t b = Fetch64(s + 8);
  const uint64_t c = Fetch64(s + len - 8) * mul;
  const uint64_t d = Fetch64(s + len - 16) * k2;
  const uint64_t y = Rotate(a + b, 43) + Rotate(c, 30) + d;
  const uint64_t z = HashLen16(y, a + Rotate(b + k2, 18) + c, mul);
  const uint64_t e = Fetch64(s + 16) * mul;
  const uint64_t f = Fetch64(s + 24);
  const uint64_t g = (y + Fetch64(s + len - 32)) * mul;
  const uint64_t h = (z + Fetch64(s + len - 24)) * mul;
  return HashLen16(Rotate(e + f, 43) + Rotate(g, 30) + h, e + Rotate(f + a, 18) + g, mul);
}

}  // namespace

uint64_t Fingerprint64(const char* s, size_t len) {
  constexpr uint64_t seed = 81;
  if (len <= 32) return len <= 16 ? HashLen0to16(s, len) : HashLen17to32(s, len);
  if (len <= 64) return HashLen33to64(s, len);
  uint64_t x = seed;
  uint64_t y = seed * k1 + 113;
  uint64_t z = ShiftMix(y * k2 + 113) * k2;
  std::pair<uint64_t, uint64_t> v = {0, 0};
  std::pair<uint64_t, uint64_t> w = {0, 0};
  x = x * k2 + Fetch64(s);
  const char* end = s + ((len - 1) / 64) * 64;
  const char* last64 = end + ((len - 1) & 63) - 63;
  do {
    x = Rotate(x + y + v.first + Fetch64(s + 8), 37) * k1;
    y = Rotate(y + v.second + Fetch64(s + 48), 42) * k1;
    x ^= w.second;
    y += v.first + Fetch64(s + 40);
    z = Rotate(z + w.first, 33) * k1;
    v = WeakHashLen32WithSeeds(s, v.second * k1, x + w.first);
    w = WeakHashLen32WithSeeds(s + 32, z + w.second, y + Fetch64(s + 16));
    std::swap(z, x);
    s += 64;
  } while (s != end);
  const uint64_t mul = k1 + ((z & 0xff) << 1);
  s = last64;
  w.first += ((len - 1) & 63);
  v.first += w.first;
  w.first += v.first;
  x = Rotate(x + y + v.first + Fetch64(s + 8), 37) * mul;
  y = Rotate(y + v.second + Fetch64(s + 48), 42) * mul;
  x ^= w.second * 9;
  y += v.first * 9 + Fetch64(s + 40);
  z = Rotate(z + w.first, 33) * mul;
  v = WeakHashLen32WithSeeds(s, v.second * mul, x + w.first);
  w = WeakHashLen32WithSeeds(s + 32, z + w.second, y + Fetch64(s + 16));
  std::swap(z, x);
  return HashLen16(HashLen16(v.first, w.first, mul) + ShiftMix(y) * k0 + z,
                   HashLen16(v.second, w.second, mul) + x, mul);
}

}  // namespace farmhash

namespace {

class StringToHashBucketFastKernel : public OpKernel {
 public:
  explicit StringToHashBucketFastKernel(const ir::Node& node)
      : node_(node.Describe()), buckets_(node.GetInt("num_buckets", 0)) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (buckets_ < 1) {
      return absl::InvalidArgumentError(absl::StrCat(node_, ": num_buckets must be positive"));
    }
    if (ctx.inputs.size() != 1 || ctx.inputs[0].dtype != DType::kString) {
      return absl::InvalidArgumentError(absl::StrCat(node_, ": expects one string input"));
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kInt64;
    ctx.output_shapes[0] = ctx.inputs[0].shape;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& in = ctx.inputs[0];
    const std::string* s = in.data<std::string>();
    int64_t* out = ctx.outputs[0].data<int64_t>();
    const uint64_t buckets = static_cast<uint64_t>(buckets_);
    for (int64_t i = 0; i < in.num_elements(); ++i) {
      out[i] = static_cast<int64_t>(farmhash::Fingerprint64(s[i].data(), s[i].size()) % buckets);
    }
    return absl::OkStatus();
  }

 private:
  std::string node_;
  int64_t buckets_;
};

KILN_REGISTER_KERNEL_CLASS("kiln", "StringToHashBucketFast", StringToHashBucketFastKernel);

}  // namespace

KILN_KERNEL_FILE(tf_string_hash);

}  // namespace kiln::kernels
