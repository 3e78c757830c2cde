// Shared pieces of the kiln._kiln extension: Kiln errors as Python exceptions (and Python
// exceptions carried through Kiln as absl::Status), and tensors as NumPy arrays, DLPack
// capsules and back.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/core/tensor.h"
#include "kiln/data/element.h"

namespace kiln::python {

namespace py = pybind11;

// ---- errors ----

// Creates kiln.Error and its subclasses in `m`. Each Kiln status code has a class deriving
// from kiln.Error and, where Python has one, from the built-in exception of the same meaning:
//   InvalidArgumentError, OutOfRangeError -> ValueError (bad arguments or values)
//   NotFoundError -> FileNotFoundError; DataLossError -> OSError (missing or corrupt files)
//   PermissionDeniedError -> PermissionError
// so that `except ValueError` and `except OSError` work as in any Python library, and
// `except kiln.Error` catches everything Kiln reports. Each carries Kiln's message and `.code`.
void RegisterErrors(py::module_& m);

// Raises `status` (not OK) as its Python exception. A status that carries a Python exception
// (StatusFromPythonError) re-raises that very exception object, traceback included.
[[noreturn]] void ThrowStatus(const absl::Status& status);

// The same, with the error class chosen by the caller's knowledge of the operation: opening a
// file that turns out to be malformed is a corrupt file (DataLossError, an OSError) even where
// the parser said InvalidArgument.
[[noreturn]] void ThrowFileStatus(const absl::Status& status);

// Raises `status`'s message as the exception class of `code` (a caller that knows better than
// the status code what went wrong).
[[noreturn]] void ThrowStatusAs(absl::StatusCode code, const absl::Status& status);

template <typename T>
T Unwrap(absl::StatusOr<T> value) {
  if (!value.ok()) ThrowStatus(value.status());
  return *std::move(value);
}
inline void Check(const absl::Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

// The Python exception being handled (caught as `error`) as a status that keeps the exception
// object alive until the last copy of the status is gone, so that it reaches the consumer
// unchanged even after travelling through worker threads. Requires the GIL.
absl::Status StatusFromPythonError(py::error_already_set& error);

// Drops a reference taking the GIL, from any thread; a no-op once the interpreter is
// exiting (the object is then leaked rather than touched after Python is gone).
void DecRefWithGil(PyObject* object);

// Calls into Python from Kiln's own threads (map functions, predicates, generators running in
// a pipeline), counted so that the interpreter's exit waits for those in flight and refuses new
// ones, as Python waits for its non-daemon threads: an interpreter that finalizes while a
// pipeline thread is inside a Python function (a time.sleep, a slow decode) ends that thread
// when it takes the GIL back, inside Kiln's C++ frames, which aborts or crashes the process.
// Take one before acquiring the GIL; entered() is false once the interpreter is exiting, and
// the call must then not touch Python.
class ScopedPythonCall {
 public:
  ScopedPythonCall();
  ~ScopedPythonCall();
  ScopedPythonCall(const ScopedPythonCall&) = delete;
  ScopedPythonCall& operator=(const ScopedPythonCall&) = delete;
  bool entered() const { return entered_; }

 private:
  bool entered_;
};
// The status of a call refused because the interpreter is exiting.
absl::Status InterpreterExiting();

// ---- tensors ----

// How TensorToNumpy may expose a tensor's memory.
enum class Writability {
  // Writable when no one else holds the buffer (the array is then the only way to reach it),
  // read-only otherwise (a cached element, a slice of a from_tensor_slices source, a model
  // output that aliases an input): writing through the array must not change what a later
  // epoch or another consumer sees.
  kExclusiveOnly,
  kReadOnly,
};

// A NumPy array viewing the tensor's memory (no copy) that keeps the tensor alive. String
// tensors become a `bytes` object (scalars) or an object array of bytes (tf.data's
// as_numpy_iterator does the same); bfloat16 becomes float32 (NumPy has no bfloat16).
py::object TensorToNumpy(const Tensor& tensor, Writability writability);

// A DLPack capsule ("dltensor") for torch.utils.dlpack.from_dlpack or jax.dlpack. DLPack has no
// read-only flag, so a buffer that someone else also holds is copied first. Strings: TypeError.
py::capsule TensorToDlpack(const Tensor& tensor);

// What TensorFromPython does with an array's memory.
enum class Borrow {
  kCopy,   // always copy (the Dataset keeps a snapshot, as tf.data does)
  kAllow,  // view C-contiguous, aligned arrays of a supported dtype (inputs of a run)
};

// A tensor from a NumPy array or anything np.asarray accepts. Python ints become int32 when
// they fit (int64 otherwise) and Python floats float32, as tf.constant does; bytes and str
// become string tensors. TypeError for objects that are neither.
absl::StatusOr<Tensor> TensorFromPython(py::handle object, Borrow borrow);

// ---- elements ----

// An element as Python sees it: a dict when the element has names, the value itself for one
// unnamed tensor, a tuple otherwise. The element's tensors are moved out (so that an array can
// tell that it is the only holder of its memory). `from_dlpack` (torch.utils.dlpack.from_dlpack,
// or null for NumPy arrays) makes torch tensors through DLPack instead.
py::object ElementToPython(data::Element&& element, py::handle from_dlpack);
// The reverse for values returned by Python functions: a dict (named), a tuple (components),
// anything else one tensor. `borrow` as above.
absl::StatusOr<data::Element> ElementFromPython(py::handle object, Borrow borrow);

// Binds kiln.data's and kiln.runtime's native halves.
void RegisterData(py::module_& m);
void RegisterRuntime(py::module_& m);

}  // namespace kiln::python
