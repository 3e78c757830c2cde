// Finds where a malformed ModelProto breaks, so that a truncated or corrupted file gets an
// error with a byte offset instead of protobuf's bare "parse failed".
#include <map>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "import/onnx/onnx_internal.h"

namespace kiln::import::onnx_internal {
namespace {

using google::protobuf::io::CodedInputStream;

struct MessageLayout {
  const char* name;
  std::map<int, std::pair<const char*, const MessageLayout*>> fields;  // number -> name, nested
};

const MessageLayout& NodeLayout() {
  static const MessageLayout layout{"NodeProto",
                                    {{1, {"input", nullptr}},
                                     {2, {"output", nullptr}},
                                     {3, {"name", nullptr}},
                                     {4, {"op_type", nullptr}},
                                     {5, {"attribute", nullptr}},
                                     {7, {"domain", nullptr}}}};
  return layout;
}

const MessageLayout& GraphLayout() {
  static const MessageLayout layout{"GraphProto",
                                    {{1, {"node", &NodeLayout()}},
                                     {2, {"name", nullptr}},
                                     {5, {"initializer", nullptr}},
                                     {11, {"input", nullptr}},
                                     {12, {"output", nullptr}},
                                     {13, {"value_info", nullptr}}}};
  return layout;
}

const MessageLayout& ModelLayout() {
  static const MessageLayout layout{"ModelProto",
                                    {{1, {"ir_version", nullptr}},
                                     {2, {"producer_name", nullptr}},
                                     {3, {"producer_version", nullptr}},
                                     {7, {"graph", &GraphLayout()}},
                                     {8, {"opset_import", nullptr}},
                                     {14, {"metadata_props", nullptr}},
                                     {25, {"functions", nullptr}}}};
  return layout;
}

std::string FieldLabel(const MessageLayout& layout, int number) {
  auto it = layout.fields.find(number);
  if (it == layout.fields.end()) return absl::StrCat(layout.name, " field ", number);
  return absl::StrCat(layout.name, ".", it->second.first, " (field ", number, ")");
}

// Walks [begin, end) of `bytes` as `layout`; returns the first problem or "".
std::string Walk(absl::string_view bytes, size_t begin, size_t end, const MessageLayout& layout,
                 int depth) {
  const uint8_t* base = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t pos = begin;
  while (pos < end) {
    CodedInputStream in(base + pos, static_cast<int>(end - pos));
    const size_t field_start = pos;
    const uint32_t tag = in.ReadTag();
    if (tag == 0) {
      return absl::StrCat("invalid field tag in ", layout.name, " at byte offset ", field_start);
    }
    const int number = static_cast<int>(tag >> 3);
    const int wire_type = static_cast<int>(tag & 7);
    bool ok = true;
    switch (wire_type) {
      case 0: {
        uint64_t v;
        ok = in.ReadVarint64(&v);
        break;
      }
      case 1: {
        uint64_t v;
        ok = in.ReadLittleEndian64(&v);
        break;
      }
      case 5: {
        uint32_t v;
        ok = in.ReadLittleEndian32(&v);
        break;
      }
      case 2: {
        uint32_t length;
        if (!in.ReadVarint32(&length)) {
          ok = false;
          break;
        }
        const size_t body = pos + in.CurrentPosition();
        if (length > end - body) {
          return absl::StrCat(FieldLabel(layout, number), " at byte offset ", field_start,
                              " declares ", length, " bytes but only ", end - body,
                              " remain (truncated file?)");
        }
        auto it = layout.fields.find(number);
        if (it != layout.fields.end() && it->second.second != nullptr && depth < 4) {
          std::string inner = Walk(bytes, body, body + length, *it->second.second, depth + 1);
          if (!inner.empty()) return absl::StrCat(inner, ", inside ", FieldLabel(layout, number));
        }
        pos = body + length;
        continue;
      }
      default:
        return absl::StrCat("unknown wire type ", wire_type, " for ",
                            FieldLabel(layout, number), " at byte offset ", field_start,
                            " (not a protobuf, or corrupted)");
    }
    if (!ok) {
      return absl::StrCat(FieldLabel(layout, number), " at byte offset ", field_start,
                          " is cut off (truncated file?)");
    }
    pos += in.CurrentPosition();
  }
  return "";
}

}  // namespace

std::string DescribeMalformedModel(absl::string_view bytes) {
  if (bytes.empty()) return "the file is empty";
  return Walk(bytes, 0, bytes.size(), ModelLayout(), 0);
}

}  // namespace kiln::import::onnx_internal
