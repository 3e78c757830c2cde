// Reading the text-proto file that a `kiln serve` flag names (--ssl_config_file,
// --monitoring_config_file, --batching_parameters_file).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace kiln::serving {

// The `Proto` in the text file at `path`, which --`flag` named. Errors start with "--<flag>: "
// and name the file; a parse error lists the parser's "line L column C: message"s.
template <typename Proto>
absl::StatusOr<Proto> ReadTextProto(const std::string& path, const char* flag) {
  std::ifstream file(path);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("--", flag, ": cannot read file ", path));
  }
  std::stringstream text;
  text << file.rdbuf();
  Proto proto;
  google::protobuf::TextFormat::Parser parser;
  struct Collector : google::protobuf::io::ErrorCollector {
    std::string errors;
    void AddError(int line, int column, const std::string& message) override {
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", "line ", line + 1, " column ",
                      column + 1, ": ", message);
    }
  } collector;
  parser.RecordErrorsTo(&collector);
  if (!parser.ParseFromString(text.str(), &proto)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", path, " is not a valid ",
                                                   Proto::descriptor()->name(),
                                                   " text proto: ", collector.errors));
  }
  return proto;
}

}  // namespace kiln::serving
