#include "kiln/import/saved_model.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/text_format.h"
#include "import/tf/converter.h"
#include "import/tf/tensor_bundle.h"
#include "import/tf/tensor_proto.h"
#include "kiln/core/status.h"
#include "tensorflow/core/protobuf/saved_model.pb.h"

namespace kiln::import {
namespace {

namespace fs = std::filesystem;
using tf::Converter;

// Binary protos of any size protobuf allows (SavedModels with large constants exceed the
// default 64 MiB limit of older protobuf versions).
bool ParseBinary(const std::string& bytes, google::protobuf::Message* message) {
  google::protobuf::io::ArrayInputStream array(bytes.data(), static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream coded(&array);
  coded.SetTotalBytesLimit(INT32_MAX);
  return message->ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
}

bool ParseText(const std::string& text, google::protobuf::Message* message) {
  google::protobuf::TextFormat::Parser parser;
  parser.AllowUnknownField(true);
  parser.AllowUnknownExtension(true);
  return parser.ParseFromString(text, message);
}

absl::StatusOr<tensorflow::SavedModel> ReadSavedModel(const std::string& dir) {
  tensorflow::SavedModel model;
  const std::string pb = (fs::path(dir) / "saved_model.pb").string();
  const std::string pbtxt = (fs::path(dir) / "saved_model.pbtxt").string();
  if (fs::exists(pb)) {
    KILN_ASSIGN_OR_RETURN(std::string bytes, tf::ReadFileToString(pb));
    if (!ParseBinary(bytes, &model)) {
      return absl::DataLossError(absl::StrCat(pb, ": not a valid SavedModel protobuf (",
                                              bytes.size(), " bytes; truncated or corrupt?)"));
    }
    return model;
  }
  if (fs::exists(pbtxt)) {
    KILN_ASSIGN_OR_RETURN(std::string text, tf::ReadFileToString(pbtxt));
    if (!ParseText(text, &model)) {
      return absl::DataLossError(absl::StrCat(pbtxt, ": not a valid SavedModel text proto"));
    }
    return model;
  }
  std::string hint;
  if (fs::exists(fs::path(dir) / "export.meta") || fs::exists(fs::path(dir) / "export")) {
    hint = " (it holds a legacy session-bundle export: export.meta; re-export it with "
           "tf.saved_model)";
  }
  return absl::NotFoundError(absl::StrCat(dir, ": no saved_model.pb or saved_model.pbtxt", hint));
}

std::string TagsString(const std::vector<std::string>& tags) {
  return absl::StrCat("{", absl::StrJoin(tags, ", "), "}");
}

absl::StatusOr<const tensorflow::MetaGraphDef*> FindMetaGraph(const tensorflow::SavedModel& model,
                                                              const std::string& dir,
                                                              std::vector<std::string> tags) {
  std::sort(tags.begin(), tags.end());
  tags.erase(std::unique(tags.begin(), tags.end()), tags.end());
  std::vector<std::string> available;
  for (const auto& meta : model.meta_graphs()) {
    std::vector<std::string> have(meta.meta_info_def().tags().begin(),
                                  meta.meta_info_def().tags().end());
    std::sort(have.begin(), have.end());
    have.erase(std::unique(have.begin(), have.end()), have.end());
    if (have == tags) return &meta;
    available.push_back(TagsString(have));
  }
  return absl::NotFoundError(absl::StrCat(dir, ": no MetaGraph with tag set ", TagsString(tags),
                                          "; available: ",
                                          available.empty() ? "none" : absl::StrJoin(available, ", ")));
}

absl::StatusOr<TensorInfo> ToTensorInfo(const tensorflow::TensorInfo& info,
                                        const std::string& what) {
  if (info.encoding_case() != tensorflow::TensorInfo::kName) {
    return absl::UnimplementedError(absl::StrCat(what, ": sparse and composite signature tensors "
                                                 "are not supported"));
  }
  TensorInfo out;
  out.name = info.name();
  auto dtype = tf::FromTfDataType(info.dtype());
  if (!dtype.ok()) return Annotate(dtype.status(), what);
  out.dtype = *dtype;
  tf::PartialShape shape = tf::FromTfShape(info.tensor_shape());
  out.rank_known = shape.rank_known;
  out.shape = shape.dims;
  return out;
}

// GraphDef versions (TensorFlow's VersionDef semantics). Kiln reads GraphDefs as TensorFlow
// 2.18 does: kGraphDefVersion is the TF_GRAPH_DEF_VERSION 2.18 was released with (about
// 1987; the number grows by one most days of TensorFlow development), and the ops Kiln
// converts are TensorFlow 2.x's up to 2.18. TF_GRAPH_DEF_VERSION_MIN_PRODUCER is still 0.
constexpr int kGraphDefVersion = 1987;
constexpr int kGraphDefMinProducer = 0;
constexpr int kNewestTfMajor = 2;
constexpr int kNewestTfMinor = 18;
constexpr char kNewestTf[] = "TensorFlow 2.18";

// TensorFlow's own check before it runs a graph: refused when the graph needs a newer
// consumer (min_consumer), predates the oldest producer supported, or names this consumer
// version as bad.
absl::Status CheckGraphDefVersions(const tensorflow::VersionDef& versions) {
  if (versions.producer() < kGraphDefMinProducer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GraphDef producer version ", versions.producer(), " below min producer ",
        kGraphDefMinProducer, " supported by Kiln (which reads GraphDefs as ", kNewestTf,
        " does); re-export the model with a newer TensorFlow"));
  }
  if (versions.min_consumer() > kGraphDefVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GraphDef min consumer version ", versions.min_consumer(), " above current version ",
        kGraphDefVersion, " (Kiln reads GraphDefs as ", kNewestTf,
        " does); the graph needs a newer TensorFlow, re-export it with ", kNewestTf,
        " or older"));
  }
  for (int bad : versions.bad_consumers()) {
    if (bad == kGraphDefVersion) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GraphDef disallows consumer version ", kGraphDefVersion, " (", kNewestTf,
          "'s, which Kiln reads GraphDefs as): its producer marked that version as buggy"));
    }
  }
  return absl::OkStatus();
}

// "2.18.0-rc1" -> {2, 18}; nullopt when it does not start with two numbers.
std::optional<std::pair<int, int>> MajorMinor(const std::string& version) {
  std::vector<std::string> parts = absl::StrSplit(version, absl::MaxSplits('.', 2));
  int major = 0;
  int minor = 0;
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[0], &major)) return std::nullopt;
  const std::string digits = parts[1].substr(0, parts[1].find_first_not_of("0123456789"));
  if (!absl::SimpleAtoi(digits, &minor)) return std::nullopt;
  return std::make_pair(major, minor);
}

// A graph from a newer TensorFlow than Kiln knows still loads, as it would in TensorFlow 2.18
// (which refuses only by min_consumer): ops added since are refused by name as unsupported,
// but attributes added to ops Kiln knows are not checked, so the import says so. Returns the
// warning, or "" when the graph is not newer.
std::string NewerGraphWarning(const tensorflow::VersionDef& versions,
                              const std::string& tensorflow_version) {
  const std::string tf_label =
      tensorflow_version.empty() ? "" : absl::StrCat(" (TensorFlow ", tensorflow_version, ")");
  if (versions.producer() > kGraphDefVersion) {
    return absl::StrCat("GraphDef producer version ", versions.producer(), tf_label,
                        " is newer than ", kGraphDefVersion, " (", kNewestTf,
                        "), the newest Kiln's TensorFlow importer knows; ops added since are "
                        "refused as unsupported, attributes added since are not checked");
  }
  const auto major_minor = MajorMinor(tensorflow_version);
  if (major_minor.has_value() && *major_minor > std::make_pair(kNewestTfMajor, kNewestTfMinor)) {
    return absl::StrCat("the model was saved by TensorFlow ", tensorflow_version,
                        ", newer than ", kNewestTf,
                        ", the newest Kiln's TensorFlow importer knows; ops added since are "
                        "refused as unsupported, attributes added since are not checked");
  }
  return "";
}

// The value name a signature key gets in the graph: the key, made safe.
std::string ValueNameForKey(const std::string& key) { return key; }

absl::Status ImportSignatures(const tensorflow::MetaGraphDef& meta, Converter& converter,
                              ImportedModel& model) {
  // Which variables some signature writes must be known before the first graph reads one:
  // get_counter reads `counter` as a mutable variable only because incr_counter writes it.
  std::vector<std::string> all_fetches;
  for (const auto& [key, sig] : meta.signature_def()) {
    if (absl::StartsWith(key, "__")) continue;
    for (const auto& [output_key, info] : sig.outputs()) all_fetches.push_back(info.name());
  }
  KILN_RETURN_IF_ERROR(converter.AnalyzeVariableWrites(all_fetches));
  // Keys in sorted order, like the signature's inputs and outputs (protobuf map iteration
  // order is unspecified).
  for (const auto& [key, sig] : std::map<std::string, tensorflow::SignatureDef>(
           meta.signature_def().begin(), meta.signature_def().end())) {
    if (absl::StartsWith(key, "__")) continue;  // __saved_model_init_op and friends
    SignatureGraph out;
    out.key = key;
    out.method_name = sig.method_name();
    std::vector<Converter::Feed> feeds;
    // Keys in sorted order: protobuf map iteration order is unspecified.
    for (const auto& [input_key, info] :
         std::map<std::string, tensorflow::TensorInfo>(sig.inputs().begin(), sig.inputs().end())) {
      KILN_ASSIGN_OR_RETURN(TensorInfo ti,
                            ToTensorInfo(info, absl::StrCat("signature '", key, "' input '",
                                                            input_key, "'")));
      out.input_keys.push_back(input_key);
      feeds.push_back({ti.name, ValueNameForKey(input_key), ti.dtype,
                       ti.rank_known ? static_cast<int>(ti.shape.size()) : -1});
      out.inputs[input_key] = ti;
    }
    std::vector<std::string> fetches;
    for (const auto& [output_key, info] :
         std::map<std::string, tensorflow::TensorInfo>(sig.outputs().begin(), sig.outputs().end())) {
      KILN_ASSIGN_OR_RETURN(TensorInfo ti,
                            ToTensorInfo(info, absl::StrCat("signature '", key, "' output '",
                                                            output_key, "'")));
      out.output_keys.push_back(output_key);
      fetches.push_back(ti.name);
      out.outputs[output_key] = ti;
    }
    auto graph = converter.BuildGraph(feeds, fetches);
    if (!graph.ok()) {
      return Annotate(graph.status(), absl::StrCat("signature '", key, "'"));
    }
    out.graph = *std::move(graph);
    out.graph.name = key;
    model.signatures.push_back(std::move(out));
  }
  if (model.signatures.empty()) {
    return absl::NotFoundError("the MetaGraph has no signatures to serve");
  }
  return absl::OkStatus();
}

}  // namespace

bool IsSavedModelDir(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "saved_model.pb", ec) ||
         fs::is_regular_file(fs::path(dir) / "saved_model.pbtxt", ec);
}

absl::StatusOr<ImportedModel> ImportSavedModel(const std::string& dir,
                                               const std::vector<std::string>& tags) {
  KILN_ASSIGN_OR_RETURN(tensorflow::SavedModel saved_model, ReadSavedModel(dir));
  KILN_ASSIGN_OR_RETURN(const tensorflow::MetaGraphDef* meta, FindMetaGraph(saved_model, dir, tags));
  KILN_RETURN_IF_ERROR(Annotate(CheckGraphDefVersions(meta->graph_def().versions()), dir));
  std::unique_ptr<tf::BundleReader> variables;
  const std::string prefix = (fs::path(dir) / "variables" / "variables").string();
  if (fs::exists(prefix + ".index")) {
    auto reader = tf::BundleReader::Open(prefix);
    if (!reader.ok()) return Annotate(reader.status(), dir);
    variables = *std::move(reader);
  }
  tf::ImportSource source;
  source.graph = &meta->graph_def();
  source.meta_graph = meta;
  source.export_dir = dir;
  source.variables = variables.get();
  Converter converter(source);
  KILN_RETURN_IF_ERROR(Annotate(converter.Prepare(), dir));
  ImportedModel model;
  model.platform = "tensorflow";
  model.path = dir;
  model.tags.assign(meta->meta_info_def().tags().begin(), meta->meta_info_def().tags().end());
  if (fs::is_directory(fs::path(dir) / "assets.extra")) {
    model.assets_extra_dir = (fs::path(dir) / "assets.extra").string();
  }
  KILN_RETURN_IF_ERROR(Annotate(ImportSignatures(*meta, converter, model), dir));
  model.properties.emplace_back("tensorflow_version", meta->meta_info_def().tensorflow_version());
  model.properties.emplace_back("graph_def_producer",
                                std::to_string(meta->graph_def().versions().producer()));
  if (std::string warning = NewerGraphWarning(meta->graph_def().versions(),
                                              meta->meta_info_def().tensorflow_version());
      !warning.empty()) {
    model.properties.emplace_back("warning", warning);
  }
  model.properties.emplace_back("meta_graph_tags", TagsString(model.tags));
  model.properties.emplace_back("variables_restored",
                                std::to_string(converter.variables_restored()));
  if (converter.mutable_variables() > 0) {
    // State per loaded model: what `kiln inspect` should say about a stateful model.
    model.properties.emplace_back("mutable_variables",
                                  std::to_string(converter.mutable_variables()));
  }
  if (variables) {
    model.properties.emplace_back("checkpoint_shards", std::to_string(variables->num_shards()));
  }
  return model;
}

absl::StatusOr<ImportedModel> ImportFrozenGraph(const std::string& path,
                                                const FrozenGraphOptions& options) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, tf::ReadFileToString(path));
  tensorflow::GraphDef graph;
  if (!ParseBinary(bytes, &graph) && !ParseText(bytes, &graph)) {
    return absl::DataLossError(absl::StrCat(path, ": not a GraphDef (binary or text)"));
  }
  if (graph.node_size() == 0) {
    // Other protobufs (an ONNX model, say) often parse as a GraphDef with only unknown fields.
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a TensorFlow GraphDef: it has no nodes"));
  }
  KILN_RETURN_IF_ERROR(Annotate(CheckGraphDefVersions(graph.versions()), path));
  std::map<std::string, const tensorflow::NodeDef*> nodes;
  std::set<std::string> consumed;
  for (const auto& node : graph.node()) {
    nodes[node.name()] = &node;
    for (const std::string& in : node.input()) {
      std::string name = absl::StartsWith(in, "^") ? in.substr(1) : in;
      consumed.insert(name.substr(0, name.find(':')));
    }
  }
  auto strip = [](const std::string& s) { return s.substr(0, s.find(':')); };
  SignatureGraph sig;
  sig.key = "serving_default";
  sig.method_name = "tensorflow/serving/predict";
  std::vector<Converter::Feed> feeds;
  std::vector<std::string> inputs = options.inputs;
  if (inputs.empty()) {
    for (const auto& node : graph.node()) {
      if (node.op() == "Placeholder") inputs.push_back(node.name());
    }
  }
  for (const std::string& in : inputs) {
    auto it = nodes.find(strip(in));
    if (it == nodes.end()) return absl::NotFoundError(absl::StrCat(path, ": no node '", in, "'"));
    TensorInfo info;
    info.name = absl::StrContains(in, ":") ? in : in + ":0";
    auto dtype_attr = it->second->attr().find("dtype");
    if (dtype_attr == it->second->attr().end()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": input '", in, "' has no dtype"));
    }
    KILN_ASSIGN_OR_RETURN(info.dtype, tf::FromTfDataType(dtype_attr->second.type()));
    auto shape_attr = it->second->attr().find("shape");
    if (shape_attr != it->second->attr().end()) {
      tf::PartialShape shape = tf::FromTfShape(shape_attr->second.shape());
      info.rank_known = shape.rank_known;
      info.shape = shape.dims;
    }
    const std::string key = strip(in);
    sig.input_keys.push_back(key);
    sig.inputs[key] = info;
    feeds.push_back({info.name, key, info.dtype,
                     info.rank_known ? static_cast<int>(info.shape.size()) : -1});
  }
  std::vector<std::string> outputs = options.outputs;
  if (outputs.empty()) {
    for (const auto& node : graph.node()) {
      if (consumed.count(node.name()) || node.op() == "Const" || node.op() == "NoOp" ||
          node.op() == "Assert" || node.op() == "Placeholder") {
        continue;
      }
      outputs.push_back(node.name());
    }
  }
  std::vector<std::string> fetches;
  for (const std::string& out : outputs) {
    auto it = nodes.find(strip(out));
    if (it == nodes.end()) return absl::NotFoundError(absl::StrCat(path, ": no node '", out, "'"));
    TensorInfo info;
    info.name = absl::StrContains(out, ":") ? out : out + ":0";
    auto t = it->second->attr().find("T");
    if (t != it->second->attr().end()) {
      auto dtype = tf::FromTfDataType(t->second.type());
      if (dtype.ok()) info.dtype = *dtype;
    }
    const std::string key = strip(out);
    sig.output_keys.push_back(key);
    sig.outputs[key] = info;
    fetches.push_back(info.name);
  }
  if (fetches.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no outputs"));
  tf::ImportSource source;
  source.graph = &graph;
  Converter converter(source);
  KILN_RETURN_IF_ERROR(Annotate(converter.Prepare(), path));
  auto built = converter.BuildGraph(feeds, fetches);
  if (!built.ok()) return Annotate(built.status(), path);
  sig.graph = *std::move(built);
  sig.graph.name = sig.key;
  ImportedModel model;
  model.platform = "tensorflow";
  model.path = path;
  model.signatures.push_back(std::move(sig));
  model.properties.emplace_back("format", "frozen GraphDef");
  model.properties.emplace_back("graph_nodes", std::to_string(graph.node_size()));
  model.properties.emplace_back("graph_def_producer", std::to_string(graph.versions().producer()));
  if (std::string warning = NewerGraphWarning(graph.versions(), ""); !warning.empty()) {
    model.properties.emplace_back("warning", warning);
  }
  return model;
}

absl::StatusOr<SavedModelSummary> DescribeSavedModel(const std::string& dir) {
  KILN_ASSIGN_OR_RETURN(tensorflow::SavedModel saved_model, ReadSavedModel(dir));
  SavedModelSummary summary;
  summary.path = dir;
  summary.schema_version = saved_model.saved_model_schema_version();
  for (const auto& meta : saved_model.meta_graphs()) {
    MetaGraphSummary m;
    m.tags.assign(meta.meta_info_def().tags().begin(), meta.meta_info_def().tags().end());
    m.tensorflow_version = meta.meta_info_def().tensorflow_version();
    for (const auto& [key, sig] : std::map<std::string, tensorflow::SignatureDef>(
             meta.signature_def().begin(), meta.signature_def().end())) {
      SignatureSummary s;
      s.key = key;
      s.method_name = sig.method_name();
      auto add = [](const auto& proto_map, std::vector<SignatureTensorSummary>* out) {
        for (const auto& [k, info] : std::map<std::string, tensorflow::TensorInfo>(
                 proto_map.begin(), proto_map.end())) {
          SignatureTensorSummary t;
          t.key = k;
          t.name = info.encoding_case() == tensorflow::TensorInfo::kCooSparse
                       ? info.coo_sparse().values_tensor_name()
                       : info.name();
          t.dtype = tf::TfDataTypeName(info.dtype());
          tf::PartialShape shape = tf::FromTfShape(info.tensor_shape());
          t.rank_known = shape.rank_known;
          t.shape = shape.dims;
          out->push_back(t);
        }
      };
      add(sig.inputs(), &s.inputs);
      add(sig.outputs(), &s.outputs);
      m.signatures.push_back(std::move(s));
    }
    std::set<std::string> ops;
    for (const auto& node : meta.graph_def().node()) ops.insert(node.op());
    for (const auto& f : meta.graph_def().library().function()) {
      for (const auto& node : f.node_def()) ops.insert(node.op());
    }
    m.ops.assign(ops.begin(), ops.end());
    summary.meta_graphs.push_back(std::move(m));
  }
  return summary;
}

std::string FormatSavedModelSummary(const SavedModelSummary& summary) {
  std::string out;
  auto shape_string = [](const SignatureTensorSummary& t) {
    if (!t.rank_known) return std::string("unknown_rank");
    std::vector<std::string> dims;
    for (int64_t d : t.shape) dims.push_back(std::to_string(d));
    // saved_model_cli joins the dims itself: a vector is "(-1)", not Python's "(-1,)".
    return absl::StrCat("(", absl::StrJoin(dims, ", "), ")");
  };
  for (const MetaGraphSummary& m : summary.meta_graphs) {
    std::vector<std::string> quoted;
    for (const auto& t : m.tags) quoted.push_back(absl::StrCat("'", t, "'"));
    absl::StrAppend(&out, "\nMetaGraphDef with tag-set: ", absl::StrJoin(quoted, ", "),
                    " contains the following SignatureDefs:\n");
    for (const SignatureSummary& s : m.signatures) {
      absl::StrAppend(&out, "\nsignature_def['", s.key, "']:\n");
      absl::StrAppend(&out, "  The given SavedModel SignatureDef contains the following input(s):\n");
      for (const auto& t : s.inputs) {
        absl::StrAppend(&out, "    inputs['", t.key, "'] tensor_info:\n        dtype: ", t.dtype,
                        "\n        shape: ", shape_string(t), "\n        name: ", t.name, "\n");
      }
      absl::StrAppend(&out, "  The given SavedModel SignatureDef contains the following output(s):\n");
      for (const auto& t : s.outputs) {
        absl::StrAppend(&out, "    outputs['", t.key, "'] tensor_info:\n        dtype: ", t.dtype,
                        "\n        shape: ", shape_string(t), "\n        name: ", t.name, "\n");
      }
      absl::StrAppend(&out, "  Method name is: ", s.method_name, "\n");
    }
    std::vector<std::string> ops;
    for (const auto& op : m.ops) ops.push_back(absl::StrCat("'", op, "'"));
    absl::StrAppend(&out, "The MetaGraph with tag set [", absl::StrJoin(quoted, ", "),
                    "] contains the following ops: {", absl::StrJoin(ops, ", "), "}\n");
  }
  return out;
}

}  // namespace kiln::import
