// kiln.runtime's native half: kiln::runtime::Model. kiln/runtime.py adds the Python names.
#include <pybind11/stl.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common.h"
#include "kiln/runtime/model.h"

namespace kiln::python {
namespace {

// NumPy's spelling of a dtype (what users compare against); "string" and "bfloat16" where
// NumPy has none.
std::string NumpyName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat64:
      return "float64";
    case DType::kString:
      return "string";
    default:
      return std::string(DTypeName(dtype));  // int8 ... uint64, bool: the same names
  }
}

py::object ShapeToPython(const TensorInfo& info) {
  if (!info.rank_known) return py::none();
  py::tuple shape(info.shape.size());
  for (size_t i = 0; i < info.shape.size(); ++i) {
    shape[i] = info.shape[i] < 0 ? py::object(py::none()) : py::object(py::int_(info.shape[i]));
  }
  return shape;
}

// A loaded model. run() is the hot path: the signature is looked up once per name, inputs are
// viewed rather than copied where their dtype and layout allow, and the GIL is released while
// the plan runs, so Python threads can run models concurrently.
class PyModel {
 public:
  explicit PyModel(std::shared_ptr<runtime::Model> model) : model_(std::move(model)) {}

  py::dict Run(py::dict inputs, const std::string& signature,
               const std::optional<std::vector<std::string>>& output_keys) {
    const runtime::SignatureHandle& handle = Handle(signature);
    const SignatureInfo& info = handle.signature_info();
    std::vector<Tensor> tensors;
    tensors.reserve(info.input_keys.size());
    for (const std::string& key : info.input_keys) {
      PyObject* value = PyDict_GetItemString(inputs.ptr(), key.c_str());
      if (value == nullptr) {
        throw py::value_error(absl::StrCat("signature '", info.key, "' needs input '", key,
                                           "'; it takes ", absl::StrJoin(info.input_keys, ", ")));
      }
      absl::StatusOr<Tensor> tensor = TensorFromPython(value, Borrow::kAllow);
      if (!tensor.ok()) {
        ThrowStatus(absl::Status(tensor.status().code(),
                                 absl::StrCat("input '", key, "': ", tensor.status().message())));
      }
      tensors.push_back(*std::move(tensor));
    }
    if (static_cast<size_t>(PyDict_Size(inputs.ptr())) != info.input_keys.size()) {
      for (auto item : inputs) {
        const std::string key = py::str(item.first).cast<std::string>();
        if (!info.inputs.count(key)) {
          throw py::value_error(absl::StrCat("signature '", info.key, "' has no input '", key,
                                             "'; it takes ", absl::StrJoin(info.input_keys, ", ")));
        }
      }
    }
    std::vector<size_t> selected;
    if (output_keys) {
      for (const std::string& key : *output_keys) {
        auto it = std::find(info.output_keys.begin(), info.output_keys.end(), key);
        if (it == info.output_keys.end()) {
          throw py::value_error(absl::StrCat("signature '", info.key, "' has no output '", key,
                                             "'; it has ", absl::StrJoin(info.output_keys, ", ")));
        }
        selected.push_back(static_cast<size_t>(it - info.output_keys.begin()));
      }
    }
    std::vector<Tensor> outputs;
    absl::Status status;
    {
      py::gil_scoped_release nogil;
      status = model_->Run(handle, tensors, &outputs);
    }
    Check(status);
    py::dict result;
    auto put = [&](size_t i) {
      Tensor out = std::move(outputs[i]);
      result[py::str(info.output_keys[i])] = TensorToNumpy(out, Writability::kExclusiveOnly);
    };
    if (output_keys) {
      for (size_t i : selected) put(i);
    } else {
      for (size_t i = 0; i < outputs.size(); ++i) put(i);
    }
    return result;
  }

  const runtime::Model& model() const { return *model_; }

 private:
  const runtime::SignatureHandle& Handle(const std::string& signature) {
    auto it = handles_.find(signature);
    if (it != handles_.end()) return *it->second;
    absl::StatusOr<const runtime::SignatureHandle*> handle = model_->GetSignature(signature);
    if (!handle.ok()) {
      // An unknown key is a bad argument, whatever code the lookup uses.
      throw py::value_error(std::string(handle.status().message()));
    }
    handles_.emplace(signature, *handle);
    return **handle;
  }

  std::shared_ptr<runtime::Model> model_;
  // Touched only with the GIL held.
  std::map<std::string, const runtime::SignatureHandle*, std::less<>> handles_;
};

}  // namespace

void RegisterRuntime(py::module_& m) {
  py::module_ r = m.def_submodule("runtime", "kiln::runtime bindings (use kiln.runtime)");

  py::class_<TensorInfo>(r, "TensorInfo", "One input or output of a signature.")
      .def_readonly("name", &TensorInfo::name)
      .def_property_readonly("dtype", [](const TensorInfo& t) { return NumpyName(t.dtype); })
      .def_property_readonly("shape", &ShapeToPython,
                             "A tuple with None for unknown dimensions; None when the rank is "
                             "unknown.")
      .def("__repr__", [](const TensorInfo& t) {
        return absl::StrCat("TensorInfo(name='", t.name, "', dtype=", NumpyName(t.dtype),
                            ", shape=", py::str(ShapeToPython(t)).cast<std::string>(), ")");
      });
  py::class_<SignatureInfo>(r, "Signature")
      .def_readonly("key", &SignatureInfo::key)
      .def_readonly("method_name", &SignatureInfo::method_name)
      .def_readonly("input_keys", &SignatureInfo::input_keys)
      .def_readonly("output_keys", &SignatureInfo::output_keys)
      .def_readonly("inputs", &SignatureInfo::inputs)
      .def_readonly("outputs", &SignatureInfo::outputs)
      .def("__repr__", [](const SignatureInfo& s) {
        return absl::StrCat("Signature('", s.key, "', inputs=[", absl::StrJoin(s.input_keys, ", "),
                            "], outputs=[", absl::StrJoin(s.output_keys, ", "), "])");
      });

  py::class_<PyModel>(r, "Model")
      .def(py::init([](const std::string& path, const std::string& tags, bool disable_optimizer,
                       bool allow_compression, int intra, int inter, size_t plan_cache_capacity,
                       size_t run_memory_budget_bytes) {
             if (intra < 0 || inter < 0) {
               throw py::value_error("intra_op_threads and inter_op_threads must be >= 0");
             }
             runtime::ModelOptions options;
             options.tags = tags;
             options.disable_optimizer = disable_optimizer;
             options.allow_compression = allow_compression;
             options.intra_op_threads = intra;
             options.inter_op_threads = inter;
             options.plan_cache_capacity = plan_cache_capacity;
             options.run_memory_budget_bytes = run_memory_budget_bytes;
             absl::StatusOr<std::shared_ptr<runtime::Model>> model;
             {
               py::gil_scoped_release nogil;  // importing and optimizing can take seconds
               model = runtime::Model::Load(path, options);
             }
             if (!model.ok()) ThrowFileStatus(model.status());
             return std::make_unique<PyModel>(*std::move(model));
           }),
           py::arg("path"), py::arg("tags"), py::arg("disable_optimizer"),
           py::arg("allow_compression"), py::arg("intra_op_threads"), py::arg("inter_op_threads"),
           py::arg("plan_cache_capacity"), py::arg("run_memory_budget_bytes"))
      .def("run", &PyModel::Run, py::arg("inputs"), py::arg("signature"),
           py::arg("output_keys") = py::none())
      .def_property_readonly("path", [](const PyModel& m) { return m.model().path(); })
      .def_property_readonly("platform", [](const PyModel& m) { return m.model().platform(); })
      .def_property_readonly("signatures", [](const PyModel& m) { return m.model().signatures(); })
      .def("precompile",
           [](const PyModel& m, const std::string& signature,
              const std::map<std::string, std::vector<int64_t>>& shapes) {
             std::map<std::string, Shape> input_shapes;
             for (const auto& [key, dims] : shapes) input_shapes.emplace(key, Shape(dims));
             absl::Status status;
             {
               py::gil_scoped_release nogil;
               status = m.model().Precompile(signature, input_shapes);
             }
             Check(status);
           })
      .def("inspect", [](const PyModel& m) { return m.model().Inspect(); });
}

}  // namespace kiln::python
