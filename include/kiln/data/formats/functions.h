// Built-in element functions for Dataset::Map: each returns a kiln::data::MapFn that
// transforms one component of the element (chosen by index or by name) and keeps the others.
// Each works on one element and on a batch of them (a leading batch axis), so that
// "batch, then map" runs one vectorized call per batch.
//
//   ds.Map(ParseExampleFn(spec)).Map(DecodeJpegFn("image", {.channels = 3}))
//     .Map(ResizeFn("image", 224, 224)).Map(NormalizeFn("image", mean, stddev, 1 / 255.f))
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/data/element.h"
#include "kiln/data/formats/example.h"
#include "kiln/data/formats/image.h"

namespace kiln::data::formats {

// Which tensor of an element a function reads: its position or its name.
class Component {
 public:
  Component(int index) : index_(index) {}  // NOLINT(runtime/explicit): Component(0) reads well
  Component(std::string name) : name_(std::move(name)) {}  // NOLINT(runtime/explicit)
  Component(const char* name) : name_(name) {}             // NOLINT(runtime/explicit)
  absl::StatusOr<int> Resolve(const Element& element) const;
  std::string ToString() const;
  bool operator==(const Component& other) const = default;

 private:
  int index_ = -1;
  std::string name_;
};

// Replaces a serialized tf.Example component (a string scalar, or a vector after batch) with
// ParseExamples' outputs, named by spec.OutputNames(); the element then has names (other
// components keep theirs, or get "component_<i>").
MapFn ParseExampleFn(ExampleSpec spec, Component input = 0);
// JPEG bytes -> uint8 [h, w, c]; a batch [n] of images of one size -> [n, h, w, c].
MapFn DecodeJpegFn(Component input = 0, JpegDecodeOptions options = {});
MapFn DecodePngFn(Component input = 0, int channels = 0, DType dtype = DType::kUInt8);
// [h, w, c] or [n, h, w, c] -> float32 of the new size (tf.image.resize, bilinear).
MapFn ResizeFn(Component input, int64_t height, int64_t width);
// (x * scale - mean) / stddev per channel (last axis), float32.
MapFn NormalizeFn(Component input, std::vector<float> mean, std::vector<float> stddev,
                  float scale = 1.0f);
MapFn CastFn(Component input, DType dtype);
MapFn OneHotFn(Component input, int64_t depth, float on = 1.0f, float off = 0.0f);

// The functions applied in order as one MapFn: one parallel map stage instead of several
// (what tf.data's map_fusion optimization does), saving a hand-off per function. A
// DecodeJpegFn -> ResizeFn [-> NormalizeFn] on one component runs as one DecodeJpegResized
// (same results and errors, without holding the decoded image); when that is the last
// function, the chain is a MapIntoFn (map_into.h) that writes the image into its batch slot.
MapFn Chain(std::vector<MapFn> functions);

}  // namespace kiln::data::formats
