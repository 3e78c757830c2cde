// TFRecord reading of arbitrary bytes, plain and compressed: every outcome must be a record or
// a Status, never a crash, a hang or an allocation the input does not justify.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/data/formats/tfrecord.h"

using kiln::data::formats::Compression;
using kiln::data::formats::RecordReader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the compression so one corpus covers all three.
  const Compression compression = static_cast<Compression>(data[0] % 3);
  auto reader = RecordReader::FromString(
      std::string(reinterpret_cast<const char*>(data + 1), size - 1), compression);
  std::string record;
  for (int i = 0; i < 10000 && reader->Read(&record).ok(); ++i) {
  }
  return 0;
}
