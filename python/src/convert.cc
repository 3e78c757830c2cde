// Tensors <-> NumPy arrays and DLPack capsules; elements <-> Python values.
#include <climits>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common.h"

namespace kiln::python {
namespace {

// The capsule that is the `base` of every array viewing a Kiln tensor: it owns a Tensor (a
// reference to the buffer), so the memory lives as long as the array or any view of it.
constexpr char kTensorCapsule[] = "kiln.Tensor";

void DeleteTensorCapsule(PyObject* capsule) {
  delete static_cast<Tensor*>(PyCapsule_GetPointer(capsule, kTensorCapsule));
}

// NumPy's type numbers (numpy/ndarraytypes.h; stable ABI). float16 is not in pybind11's list.
constexpr int kNpyHalf = 23;

int NumpyTypeNum(DType dtype) {
  using api = py::detail::npy_api;
  switch (dtype) {
    case DType::kFloat32:
      return api::NPY_FLOAT_;
    case DType::kFloat64:
      return api::NPY_DOUBLE_;
    case DType::kFloat16:
      return kNpyHalf;
    case DType::kInt8:
      return api::NPY_BYTE_;
    case DType::kUInt8:
      return api::NPY_UBYTE_;
    case DType::kInt16:
      return api::NPY_SHORT_;
    case DType::kUInt16:
      return api::NPY_USHORT_;
    case DType::kInt32:
      return api::NPY_INT_;
    case DType::kUInt32:
      return api::NPY_UINT_;
    case DType::kInt64:
      return api::NPY_INT64_;
    case DType::kUInt64:
      return api::NPY_UINT64_;
    case DType::kBool:
      return api::NPY_BOOL_;
    default:
      return -1;
  }
}

// The DType of a NumPy dtype, or kInvalid.
DType FromNumpyDtype(const py::dtype& dtype) {
  const int size = static_cast<int>(dtype.itemsize());
  switch (dtype.kind()) {
    case 'f':
      return size == 4   ? DType::kFloat32
             : size == 8 ? DType::kFloat64
             : size == 2 ? DType::kFloat16
                         : DType::kInvalid;
    case 'i':
      return size == 1   ? DType::kInt8
             : size == 2 ? DType::kInt16
             : size == 4 ? DType::kInt32
             : size == 8 ? DType::kInt64
                         : DType::kInvalid;
    case 'u':
      return size == 1   ? DType::kUInt8
             : size == 2 ? DType::kUInt16
             : size == 4 ? DType::kUInt32
             : size == 8 ? DType::kUInt64
                         : DType::kInvalid;
    case 'b':
      return size == 1 ? DType::kBool : DType::kInvalid;
    case 'O':
    case 'S':
    case 'U':
      return DType::kString;
    default:
      return DType::kInvalid;
  }
}

std::vector<py::ssize_t> Dims(const Shape& shape) {
  return std::vector<py::ssize_t>(shape.dims().begin(), shape.dims().end());
}

py::object StringToPython(const std::string& s) {
  return py::reinterpret_steal<py::object>(
      PyBytes_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size())));
}

py::object StringTensorToNumpy(const Tensor& tensor) {
  const std::string* strings = tensor.data<std::string>();
  if (tensor.rank() == 0) return StringToPython(strings[0]);
  py::array out(py::dtype(py::detail::npy_api::NPY_OBJECT_), Dims(tensor.shape()));
  auto** cells = static_cast<PyObject**>(out.mutable_data());
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    Py_XDECREF(cells[i]);
    cells[i] = StringToPython(strings[i]).release().ptr();
  }
  return out;
}

// ---- DLPack (https://github.com/dmlc/dlpack, v0.6 ABI, which PyTorch, JAX and NumPy read).
// No Debian package ships dlpack.h; these are its structs, whose layout the spec fixes.
struct DLDevice {
  int32_t device_type;  // 1: kDLCPU
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 0: int, 1: uint, 2: float, 4: bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // nullptr: compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// What a DLManagedTensor owns: the tensor (its buffer) and the shape array it points into.
struct DlpackContext {
  DLManagedTensor managed;
  Tensor tensor;
  std::vector<int64_t> shape;
};

void DeleteDlpack(DLManagedTensor* managed) {
  delete static_cast<DlpackContext*>(managed->manager_ctx);
}

// A capsule never consumed (renamed "used_dltensor" by the consumer) still owns its tensor.
void DeleteDlpackCapsule(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  }
}

bool DlpackType(DType dtype, DLDataType* out) {
  const uint8_t bits = static_cast<uint8_t>(DTypeSize(dtype) * 8);
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
      *out = {2, bits, 1};
      return true;
    case DType::kBFloat16:
      *out = {4, 16, 1};
      return true;
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
      *out = {0, bits, 1};
      return true;
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
    // bool as uint8: DLPack's bool code (6) is newer than what PyTorch 1.13 reads; the caller
    // views the result as torch.bool.
    case DType::kBool:
      *out = {1, 8, 1};
      return true;
    default:
      return false;
  }
}

bool IsNumpyGenericOrArray(py::handle object) {
  if (py::isinstance<py::array>(object)) return true;
  static PyTypeObject* generic = nullptr;  // numpy.generic, the base of NumPy's scalars
  if (generic == nullptr) {
    generic = reinterpret_cast<PyTypeObject*>(
        py::object(py::module_::import("numpy").attr("generic")).release().ptr());
  }
  return PyObject_TypeCheck(object.ptr(), generic);
}

absl::StatusOr<Tensor> StringTensorFromArray(const py::array& array) {
  Tensor out(DType::kString,
             Shape(std::vector<int64_t>(array.shape(), array.shape() + array.ndim())));
  std::string* strings = out.data<std::string>();
  // ravel() gives the elements in C order whatever the array's layout.
  py::list items = array.attr("ravel")().attr("tolist")();
  for (size_t i = 0; i < items.size(); ++i) {
    PyObject* item = items[i].ptr();
    if (PyBytes_Check(item)) {
      strings[i].assign(PyBytes_AS_STRING(item), PyBytes_GET_SIZE(item));
    } else if (PyUnicode_Check(item)) {
      Py_ssize_t size = 0;
      const char* utf8 = PyUnicode_AsUTF8AndSize(item, &size);
      if (utf8 == nullptr) throw py::error_already_set();
      strings[i].assign(utf8, size);
    } else {
      throw py::type_error(absl::StrCat("a string tensor's element ", i, " is a ",
                                        Py_TYPE(item)->tp_name, ", not bytes or str"));
    }
  }
  return out;
}

}  // namespace

py::object TensorToNumpy(const Tensor& tensor, Writability writability) {
  if (tensor.dtype() == DType::kString) return StringTensorToNumpy(tensor);
  if (tensor.dtype() == DType::kBFloat16) {
    Tensor widened(DType::kFloat32, tensor.shape());
    const auto* in = tensor.data<BFloat16>();
    float* out = widened.data<float>();
    for (int64_t i = 0; i < tensor.num_elements(); ++i) out[i] = static_cast<float>(in[i]);
    return TensorToNumpy(widened, Writability::kExclusiveOnly);
  }
  const int type_num = NumpyTypeNum(tensor.dtype());
  if (type_num < 0 || !tensor.valid()) {
    throw py::type_error(
        absl::StrCat("no NumPy dtype for a ", DTypeName(tensor.dtype()), " tensor"));
  }
  // The capsule holds a reference: counted before it exists, the caller's copy is the only other.
  const bool exclusive = tensor.buffer() && tensor.buffer().use_count() == 1;
  auto* held = new Tensor(tensor);
  py::object base =
      py::reinterpret_steal<py::object>(PyCapsule_New(held, kTensorCapsule, DeleteTensorCapsule));
  if (!base) {
    delete held;
    throw py::error_already_set();
  }
  const size_t item = DTypeSize(tensor.dtype());
  std::vector<py::ssize_t> strides(tensor.rank());
  size_t stride = item;
  for (int i = tensor.rank() - 1; i >= 0; --i) {
    strides[i] = static_cast<py::ssize_t>(stride);
    stride *= static_cast<size_t>(tensor.dim(i));
  }
  py::array array(py::dtype(type_num), Dims(tensor.shape()), strides, held->raw_data(), base);
  if (writability == Writability::kReadOnly || !exclusive) {
    py::detail::array_proxy(array.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  }
  return array;
}

py::capsule TensorToDlpack(const Tensor& tensor) {
  DLDataType type;
  if (!DlpackType(tensor.dtype(), &type)) {
    throw py::type_error(
        absl::StrCat("a ", DTypeName(tensor.dtype()), " tensor has no DLPack form"));
  }
  auto* context = new DlpackContext;
  // PyTorch's tensors are writable and DLPack cannot say otherwise: share only what no one
  // else holds (a fresh batch), copy the rest (a cached element, a slice of a source).
  context->tensor = tensor.buffer().use_count() == 1 ? tensor : tensor.Clone();
  context->shape = context->tensor.shape().ToVector();
  DLTensor& dl = context->managed.dl_tensor;
  dl.data = context->tensor.raw_data();
  dl.device = {1, 0};
  dl.ndim = context->tensor.rank();
  dl.dtype = type;
  dl.shape = context->shape.data();
  dl.strides = nullptr;
  dl.byte_offset = 0;
  context->managed.manager_ctx = context;
  context->managed.deleter = DeleteDlpack;
  PyObject* capsule = PyCapsule_New(&context->managed, "dltensor", DeleteDlpackCapsule);
  if (capsule == nullptr) {
    delete context;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

absl::StatusOr<Tensor> TensorFromPython(py::handle object, Borrow borrow) {
  PyObject* o = object.ptr();
  // Python scalars take tf.constant's dtypes, not NumPy's (int64 and float64).
  if (PyBool_Check(o)) return Tensor::Scalar<bool>(o == Py_True);
  if (PyLong_Check(o)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0) return absl::InvalidArgumentError("a Python int does not fit in int64");
    if (v >= INT32_MIN && v <= INT32_MAX) return Tensor::Scalar<int32_t>(static_cast<int32_t>(v));
    return Tensor::Scalar<int64_t>(static_cast<int64_t>(v));
  }
  if (PyFloat_Check(o)) return Tensor::Scalar<float>(static_cast<float>(PyFloat_AS_DOUBLE(o)));
  if (PyBytes_Check(o)) {
    return Tensor::Scalar<std::string>(std::string(PyBytes_AS_STRING(o), PyBytes_GET_SIZE(o)));
  }
  if (PyUnicode_Check(o)) {
    Py_ssize_t size = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(o, &size);
    if (utf8 == nullptr) throw py::error_already_set();
    return Tensor::Scalar<std::string>(std::string(utf8, size));
  }

  const bool from_numpy = IsNumpyGenericOrArray(object);
  py::array array = py::reinterpret_steal<py::array>(
      py::detail::npy_api::get().PyArray_FromAny_(o, nullptr, 0, 0, 0, nullptr));
  if (!array) throw py::error_already_set();

  // An array that views a Kiln tensor as it is (a Python function returning its input):
  // hand back the tensor itself, no copy and no Python object kept alive.
  if (PyObject* base = py::detail::array_proxy(array.ptr())->base;
      base != nullptr && PyCapsule_CheckExact(base) && PyCapsule_IsValid(base, kTensorCapsule)) {
    const Tensor& viewed = *static_cast<Tensor*>(PyCapsule_GetPointer(base, kTensorCapsule));
    if (viewed.raw_data() == array.data() && viewed.rank() == array.ndim() &&
        NumpyTypeNum(viewed.dtype()) == array.dtype().num() &&
        (array.flags() & py::array::c_style) &&
        std::equal(array.shape(), array.shape() + array.ndim(), viewed.shape().dims().begin())) {
      return viewed;
    }
  }

  DType dtype = FromNumpyDtype(array.dtype());
  if (dtype == DType::kInvalid) {
    throw py::type_error(absl::StrCat("unsupported dtype ",
                                      py::str(array.dtype()).cast<std::string>(),
                                      " (Kiln has bool, ints, uint8-64, float16/32/64, bytes)"));
  }
  if (dtype == DType::kString) return StringTensorFromArray(array);
  if (!from_numpy) {
    // Lists of Python numbers: tf.constant's int32 (when every value fits) and float32.
    if (dtype == DType::kFloat64) {
      array = array.attr("astype")("float32");
      dtype = DType::kFloat32;
    } else if (dtype == DType::kInt64) {
      const bool fits = array.size() == 0 || (array.attr("min")().cast<int64_t>() >= INT32_MIN &&
                                              array.attr("max")().cast<int64_t>() <= INT32_MAX);
      if (fits) {
        array = array.attr("astype")("int32");
        dtype = DType::kInt32;
      }
    }
  }
  const char order = array.dtype().byteorder();
  const bool native =
      order == '=' || order == '|' || (order == '<') == (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);
  if (!native) {
    array = array.attr("astype")(array.dtype().attr("newbyteorder")("="));
  }
  Shape shape(std::vector<int64_t>(array.shape(), array.shape() + array.ndim()));
  const int flags = array.flags();
  const bool viewable =
      (flags & py::array::c_style) && (flags & py::detail::npy_api::NPY_ARRAY_ALIGNED_);
  if (borrow == Borrow::kAllow && viewable) {
    PyObject* owner = array.release().ptr();  // the reference the buffer holds
    auto buffer = Buffer::Wrap(py::detail::array_proxy(owner)->data,
                               static_cast<size_t>(shape.num_elements()) * DTypeSize(dtype),
                               [owner] { DecRefWithGil(owner); });
    return Tensor(dtype, std::move(shape), std::move(buffer));
  }
  absl::StatusOr<Tensor> out = Tensor::Allocate(dtype, shape);
  if (!out.ok()) return out.status();
  if (viewable) {
    std::memcpy(out->raw_data(), array.data(), out->byte_size());
  } else {
    // NumPy copies any layout into C order: view the tensor's memory as an array, assign.
    py::object target = TensorToNumpy(*out, Writability::kExclusiveOnly);
    target[py::ellipsis()] = array;
  }
  return out;
}

py::object ElementToPython(data::Element&& element, py::handle from_dlpack) {
  auto convert = [&](Tensor&& tensor) -> py::object {
    if (!from_dlpack || tensor.dtype() == DType::kString) {
      Tensor local = std::move(tensor);  // the element no longer holds it
      return TensorToNumpy(local, Writability::kExclusiveOnly);
    }
    Tensor local = std::move(tensor);
    const bool is_bool = local.dtype() == DType::kBool;
    py::object out = from_dlpack(TensorToDlpack(local));
    if (is_bool) out = out.attr("view")(py::module_::import("torch").attr("bool"));
    return out;
  };
  if (element.names && element.names->size() == element.size()) {
    py::dict out;
    for (size_t i = 0; i < element.size(); ++i) {
      out[py::str((*element.names)[i])] = convert(std::move(element.tensors[i]));
    }
    return out;
  }
  if (element.size() == 1) return convert(std::move(element.tensors[0]));
  py::tuple out(element.size());
  for (size_t i = 0; i < element.size(); ++i) {
    out[i] = convert(std::move(element.tensors[i]));
  }
  return out;
}

absl::StatusOr<data::Element> ElementFromPython(py::handle object, Borrow borrow) {
  data::Element element;
  if (PyDict_Check(object.ptr())) {
    auto names = std::make_shared<std::vector<std::string>>();
    for (auto item : py::reinterpret_borrow<py::dict>(object)) {
      if (!PyUnicode_Check(item.first.ptr())) {
        throw py::type_error("an element's dict keys must be str");
      }
      names->push_back(item.first.cast<std::string>());
      absl::StatusOr<Tensor> t = TensorFromPython(item.second, borrow);
      if (!t.ok()) return t.status();
      element.tensors.push_back(*std::move(t));
    }
    element.names = std::move(names);
    return element;
  }
  if (PyTuple_Check(object.ptr())) {
    for (auto item : py::reinterpret_borrow<py::tuple>(object)) {
      if (PyTuple_Check(item.ptr()) || PyDict_Check(item.ptr())) {
        throw py::type_error(
            "nested tuples and dicts in an element are not supported: kiln.data elements are "
            "a value, a flat tuple or a flat dict");
      }
      absl::StatusOr<Tensor> t = TensorFromPython(item, borrow);
      if (!t.ok()) return t.status();
      element.tensors.push_back(*std::move(t));
    }
    return element;
  }
  absl::StatusOr<Tensor> t = TensorFromPython(object, borrow);
  if (!t.ok()) return t.status();
  element.tensors.push_back(*std::move(t));
  return element;
}

}  // namespace kiln::python
