#include "kiln/data/formats/functions.h"

#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/data/map_into.h"

namespace kiln::data::formats {
namespace {

// Runs `fn` on the selected component and puts its result in the same place.
MapFn ReplaceComponent(Component component, std::string op,
                       std::function<absl::StatusOr<Tensor>(const Tensor&)> fn) {
  return [component = std::move(component), op = std::move(op),
          fn = std::move(fn)](Element element) -> absl::StatusOr<Element> {
    KILN_ASSIGN_OR_RETURN(int index, component.Resolve(element));
    Tensor input = std::move(element.tensors[index]);
    absl::StatusOr<Tensor> result = fn(input);
    if (!result.ok()) {
      return Annotate(result.status(), absl::StrCat(op, " on component ", component.ToString()));
    }
    element.tensors[index] = *std::move(result);
    return element;
  };
}

// Decodes one image or a vector of them (stacked; all must have one shape).
absl::StatusOr<Tensor> DecodeImages(
    const Tensor& input, absl::string_view op,
    const std::function<absl::StatusOr<Tensor>(absl::string_view)>& decode) {
  if (input.dtype() != DType::kString || input.rank() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": expected a string scalar or vector, got ",
                                                   DTypeName(input.dtype()),
                                                   input.shape().ToString()));
  }
  const std::string* bytes = input.data<std::string>();
  if (input.rank() == 0) return decode(bytes[0]);
  const int64_t n = input.dim(0);
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": empty batch (image shape unknown)"));
  }
  Tensor out;
  size_t image_bytes = 0;
  for (int64_t i = 0; i < n; ++i) {
    absl::StatusOr<Tensor> image = decode(bytes[i]);
    if (!image.ok()) return Annotate(image.status(), absl::StrCat("batch element ", i));
    if (i == 0) {
      Shape shape = image->shape();
      shape.insert(0, n);
      out = Tensor(image->dtype(), shape);
      image_bytes = image->byte_size();
    } else if (image->shape() != out.SubTensor(0).shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": batch element ", i, " has shape ", image->shape().ToString(),
                       " but element 0 has ", out.SubTensor(0).shape().ToString(),
                       "; images in a batch must have one size (resize before batching)"));
    }
    std::memcpy(static_cast<char*>(out.raw_data()) + i * image_bytes, image->raw_data(),
                image_bytes);
  }
  return out;
}

// decode_jpeg, resize and normalize keep what they were built with, so that Chain can find a
// decode_jpeg -> resize [-> normalize] on one component and run it as DecodeJpegResized.
struct ImageStep {
  enum Kind { kDecodeJpeg, kResize, kNormalize } kind;
  Component input;
  JpegDecodeOptions options;
  int64_t height = 0, width = 0;
  std::vector<float> mean, stddev;
  float scale = 1.0f;
  MapFn plain;  // the function itself

  absl::StatusOr<Element> operator()(Element element) const { return plain(std::move(element)); }
};

MapFn RunInOrder(std::vector<MapFn> functions) {
  if (functions.size() == 1) return std::move(functions[0]);
  return [functions = std::move(functions)](Element element) -> absl::StatusOr<Element> {
    for (const MapFn& fn : functions) {
      KILN_ASSIGN_OR_RETURN(element, fn(std::move(element)));
    }
    return element;
  };
}

// decode_jpeg -> resize [-> normalize] on one component as one DecodeJpegResized call: the
// decoded image is never held whole. Inputs it does not take (a batch of encoded images, a
// mean that may not fit the image's channels) run the steps apart; either way the result and
// the errors are the steps'.
struct FusedImage {
  Component input = 0;
  JpegDecodeOptions options;
  int64_t height = 0, width = 0;
  bool normalize = false;
  std::vector<float> mean, stddev;
  float scale = 1.0f;
  MapFn unfused;

  absl::StatusOr<Element> Run(Element element, const SlotAllocator* allocate) const {
    KILN_ASSIGN_OR_RETURN(int index, input.Resolve(element));
    const Tensor& encoded = element.tensors[index];
    if (encoded.dtype() != DType::kString || encoded.rank() != 0 || height <= 0 || width <= 0 ||
        !NormalizeFits()) {
      return unfused(std::move(element));
    }
    const NormalizeArgs args{mean, stddev, scale};
    absl::Status slot_error;
    JpegOutputFn output;
    if (allocate != nullptr) {
      output = [&](const Shape& shape) -> absl::StatusOr<Tensor> {
        absl::StatusOr<Tensor> slot = (*allocate)(index, DType::kFloat32, shape);
        if (!slot.ok()) slot_error = slot.status();
        return slot;
      };
    }
    absl::StatusOr<Tensor> image =
        DecodeJpegResized(encoded.data<std::string>()[0], options, height, width,
                          normalize ? &args : nullptr, allocate != nullptr ? &output : nullptr);
    if (!slot_error.ok()) return slot_error;
    if (!image.ok()) {
      return Annotate(image.status(), absl::StrCat("decode_jpeg on component ", input.ToString()));
    }
    element.tensors[index] = *std::move(image);
    return element;
  }

  // Normalize's check, decided before decoding when the channel count is known then.
  bool NormalizeFits() const {
    if (!normalize) return true;
    if (mean.size() == 1 && stddev.size() == 1) return true;
    const size_t c = static_cast<size_t>(options.channels);
    return c != 0 && (mean.size() == 1 || mean.size() == c) &&
           (stddev.size() == 1 || stddev.size() == c);
  }
};

}  // namespace

absl::StatusOr<int> Component::Resolve(const Element& element) const {
  if (name_.empty()) {
    if (index_ < 0 || index_ >= static_cast<int>(element.size())) {
      return absl::InvalidArgumentError(absl::StrCat("component ", index_,
                                                     " does not exist: the element has ",
                                                     element.size(), " components"));
    }
    return index_;
  }
  const int index = element.IndexOf(name_);
  if (index < 0) {
    std::string known;
    if (element.names) {
      for (const auto& n : *element.names)
        absl::StrAppend(&known, known.empty() ? "" : ", ", "\"", n, "\"");
    }
    return absl::InvalidArgumentError(
        absl::StrCat("component \"", name_, "\" does not exist; the element has ",
                     known.empty() ? "no names" : absl::StrCat("components ", known)));
  }
  return index;
}

std::string Component::ToString() const {
  return name_.empty() ? absl::StrCat(index_) : absl::StrCat("\"", name_, "\"");
}

MapFn ParseExampleFn(ExampleSpec spec, Component input) {
  struct State {
    ExampleSpec spec;
    std::vector<std::string> output_names;
    std::mutex mutex;
    // Output names for the last input names seen (one dataset: always the same vector), so
    // elements share one names vector. Holding the input names keeps their address unique.
    std::shared_ptr<const std::vector<std::string>> cached_for;
    size_t cached_size = 0;
    std::shared_ptr<const std::vector<std::string>> cached;
  };
  auto state = std::make_shared<State>();
  state->output_names = spec.OutputNames();
  state->spec = std::move(spec);
  return [state, input = std::move(input)](Element element) -> absl::StatusOr<Element> {
    KILN_ASSIGN_OR_RETURN(int index, input.Resolve(element));
    absl::StatusOr<std::vector<Tensor>> parsed = ParseExamples(element.tensors[index], state->spec);
    if (!parsed.ok()) {
      return Annotate(parsed.status(),
                      absl::StrCat("parse_example on component ", input.ToString()));
    }
    std::shared_ptr<const std::vector<std::string>> names;
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      if (state->cached && state->cached_for == element.names &&
          state->cached_size == element.size()) {
        names = state->cached;
      }
    }
    if (!names) {
      auto built = std::make_shared<std::vector<std::string>>();
      for (size_t i = 0; i < element.size(); ++i) {
        if (static_cast<int>(i) == index) {
          built->insert(built->end(), state->output_names.begin(), state->output_names.end());
        } else {
          built->push_back(element.names ? (*element.names)[i] : absl::StrCat("component_", i));
        }
      }
      names = built;
      std::lock_guard<std::mutex> lock(state->mutex);
      state->cached_for = element.names;
      state->cached_size = element.size();
      state->cached = names;
    }
    std::vector<Tensor> tensors;
    tensors.reserve(element.size() - 1 + parsed->size());
    for (size_t i = 0; i < element.size(); ++i) {
      if (static_cast<int>(i) == index) {
        for (Tensor& t : *parsed) tensors.push_back(std::move(t));
      } else {
        tensors.push_back(std::move(element.tensors[i]));
      }
    }
    return Element(std::move(tensors), std::move(names));
  };
}

MapFn DecodeJpegFn(Component input, JpegDecodeOptions options) {
  ImageStep step{ImageStep::kDecodeJpeg, input};
  step.options = options;
  step.plain = ReplaceComponent(std::move(input), "decode_jpeg", [options](const Tensor& t) {
    return DecodeImages(t, "decode_jpeg",
                        [&](absl::string_view bytes) { return DecodeJpeg(bytes, options); });
  });
  return step;
}

MapFn DecodePngFn(Component input, int channels, DType dtype) {
  return ReplaceComponent(std::move(input), "decode_png", [channels, dtype](const Tensor& t) {
    return DecodeImages(t, "decode_png",
                        [&](absl::string_view bytes) { return DecodePng(bytes, channels, dtype); });
  });
}

MapFn ResizeFn(Component input, int64_t height, int64_t width) {
  ImageStep step{ImageStep::kResize, input};
  step.height = height;
  step.width = width;
  step.plain = ReplaceComponent(std::move(input), "resize", [height, width](const Tensor& t) {
    return ResizeBilinear(t, height, width);
  });
  return step;
}

MapFn NormalizeFn(Component input, std::vector<float> mean, std::vector<float> stddev,
                  float scale) {
  ImageStep step{ImageStep::kNormalize, input};
  step.mean = mean;
  step.stddev = stddev;
  step.scale = scale;
  step.plain = ReplaceComponent(std::move(input), "normalize",
                                [mean = std::move(mean), stddev = std::move(stddev), scale](
                                    const Tensor& t) { return Normalize(t, mean, stddev, scale); });
  return step;
}

MapFn CastFn(Component input, DType dtype) {
  return ReplaceComponent(std::move(input), "cast",
                          [dtype](const Tensor& t) { return Cast(t, dtype); });
}

MapFn OneHotFn(Component input, int64_t depth, float on, float off) {
  return ReplaceComponent(std::move(input), "one_hot",
                          [depth, on, off](const Tensor& t) { return OneHot(t, depth, on, off); });
}

MapFn Chain(std::vector<MapFn> functions) {
  // Each decode_jpeg -> resize [-> normalize] on one component becomes one FusedImage.
  std::vector<MapFn> steps;
  std::shared_ptr<const FusedImage> last_fused;
  for (size_t i = 0; i < functions.size(); ++i) {
    last_fused = nullptr;
    const ImageStep* decode = functions[i].target<ImageStep>();
    const ImageStep* resize =
        i + 1 < functions.size() ? functions[i + 1].target<ImageStep>() : nullptr;
    if (decode == nullptr || decode->kind != ImageStep::kDecodeJpeg || resize == nullptr ||
        resize->kind != ImageStep::kResize || !(resize->input == decode->input)) {
      steps.push_back(std::move(functions[i]));
      continue;
    }
    const ImageStep* normalize =
        i + 2 < functions.size() ? functions[i + 2].target<ImageStep>() : nullptr;
    if (normalize != nullptr &&
        (normalize->kind != ImageStep::kNormalize || !(normalize->input == decode->input))) {
      normalize = nullptr;
    }
    auto fused = std::make_shared<FusedImage>();
    fused->input = decode->input;
    fused->options = decode->options;
    fused->height = resize->height;
    fused->width = resize->width;
    std::vector<MapFn> unfused = {decode->plain, resize->plain};
    if (normalize != nullptr) {
      fused->normalize = true;
      fused->mean = normalize->mean;
      fused->stddev = normalize->stddev;
      fused->scale = normalize->scale;
      unfused.push_back(normalize->plain);
    }
    fused->unfused = RunInOrder(std::move(unfused));
    i += normalize != nullptr ? 2 : 1;
    steps.push_back([fused](Element element) { return fused->Run(std::move(element), nullptr); });
    last_fused = fused;
  }
  MapFn plain = RunInOrder(steps);
  if (last_fused == nullptr) return plain;
  // The last step can write its image into a batch slot (map_into.h).
  steps.pop_back();
  MapFn before = RunInOrder(std::move(steps));
  auto into = [before = std::move(before), last_fused](
                  Element element, SlotAllocator allocate) -> absl::StatusOr<Element> {
    KILN_ASSIGN_OR_RETURN(element, before(std::move(element)));
    return last_fused->Run(std::move(element), &allocate);
  };
  return MapIntoFn{std::move(plain), std::move(into)};
}

}  // namespace kiln::data::formats
