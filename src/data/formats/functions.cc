#include "kiln/data/formats/functions.h"

#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"

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
  return ReplaceComponent(std::move(input), "decode_jpeg", [options](const Tensor& t) {
    return DecodeImages(t, "decode_jpeg",
                        [&](absl::string_view bytes) { return DecodeJpeg(bytes, options); });
  });
}

MapFn DecodePngFn(Component input, int channels, DType dtype) {
  return ReplaceComponent(std::move(input), "decode_png", [channels, dtype](const Tensor& t) {
    return DecodeImages(t, "decode_png",
                        [&](absl::string_view bytes) { return DecodePng(bytes, channels, dtype); });
  });
}

MapFn ResizeFn(Component input, int64_t height, int64_t width) {
  return ReplaceComponent(std::move(input), "resize", [height, width](const Tensor& t) {
    return ResizeBilinear(t, height, width);
  });
}

MapFn NormalizeFn(Component input, std::vector<float> mean, std::vector<float> stddev,
                  float scale) {
  return ReplaceComponent(std::move(input), "normalize",
                          [mean = std::move(mean), stddev = std::move(stddev),
                           scale](const Tensor& t) { return Normalize(t, mean, stddev, scale); });
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
  return [functions = std::move(functions)](Element element) -> absl::StatusOr<Element> {
    for (const MapFn& fn : functions) {
      KILN_ASSIGN_OR_RETURN(element, fn(std::move(element)));
    }
    return element;
  };
}

}  // namespace kiln::data::formats
