// Kiln statuses as Python exceptions, and Python exceptions carried through Kiln as statuses.
#include <array>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "absl/strings/cord.h"
#include "common.h"

namespace kiln::python {
namespace {

void WaitForPythonCallsAtExit();

// The exception classes, created once when the module is imported and alive as long as the
// module (they are attributes of it). Index: absl::StatusCode value.
constexpr int kNumCodes = 17;
std::array<PyObject*, kNumCodes> g_classes{};
PyObject* g_error = nullptr;  // kiln.Error

// The status payload under which a Python exception travels (see StatusFromPythonError).
constexpr char kPythonExceptionUrl[] = "kiln.python/exception";

// Owns one reference to a Python exception for as long as some status carries it. The payload
// Cord's bytes are the pointer value itself; the Cord's releaser drops the reference.
struct HeldException {
  PyObject* object;
};

PyObject* MakeClass(py::module_& m, const char* name, PyObject* builtin, const char* doc) {
  py::tuple bases = builtin ? py::make_tuple(py::handle(g_error), py::handle(builtin))
                            : py::make_tuple(py::handle(g_error));
  const std::string qualified = std::string("kiln.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(cls));  // the module keeps a reference; so does g_classes
  return cls;
}

PyObject* ClassFor(absl::StatusCode code) {
  const int index = static_cast<int>(code);
  if (index >= 0 && index < kNumCodes && g_classes[index] != nullptr) return g_classes[index];
  return g_error;
}

[[noreturn]] void Raise(PyObject* cls, const absl::Status& status) {
  py::str message(status.message().data(), status.message().size());
  py::object exception = py::reinterpret_steal<py::object>(PyObject_CallOneArg(cls, message.ptr()));
  if (!exception) throw py::error_already_set();
  exception.attr("code") = py::str(absl::StatusCodeToString(status.code()));
  PyErr_SetObject(cls, exception.ptr());
  throw py::error_already_set();
}

// The Python exception a status carries, borrowed from the status (nullptr when none).
PyObject* CarriedException(const absl::Status& status) {
  auto payload = status.GetPayload(kPythonExceptionUrl);
  if (!payload || payload->size() != sizeof(PyObject*)) return nullptr;
  PyObject* object;
  std::string bytes(*payload);
  std::memcpy(&object, bytes.data(), sizeof(object));
  return object;
}

}  // namespace

void RegisterErrors(py::module_& m) {
  py::module_::import("atexit").attr("register")(py::cpp_function(&WaitForPythonCallsAtExit));
  g_error = PyErr_NewExceptionWithDoc(
      "kiln.Error",
      "Base class of the errors Kiln reports. `code` names the status code "
      "(e.g. 'INVALID_ARGUMENT'); the message is Kiln's.",
      nullptr, nullptr);
  if (g_error == nullptr) throw py::error_already_set();
  m.add_object("Error", py::handle(g_error));
  auto set = [&](absl::StatusCode code, const char* name, PyObject* builtin, const char* doc) {
    g_classes[static_cast<int>(code)] = MakeClass(m, name, builtin, doc);
  };
  using C = absl::StatusCode;
  set(C::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError,
      "A bad argument or value (a kiln.Error and a ValueError).");
  set(C::kOutOfRange, "OutOfRangeError", PyExc_ValueError,
      "A value outside its range (a kiln.Error and a ValueError).");
  set(C::kNotFound, "NotFoundError", PyExc_FileNotFoundError,
      "A missing file or entry (a kiln.Error and a FileNotFoundError).");
  set(C::kDataLoss, "DataLossError", PyExc_OSError,
      "A corrupt or truncated file (a kiln.Error and an OSError).");
  set(C::kPermissionDenied, "PermissionDeniedError", PyExc_PermissionError,
      "A file that may not be read or written (a kiln.Error and a PermissionError).");
  set(C::kUnimplemented, "UnimplementedError", nullptr, "Something Kiln does not support.");
  set(C::kResourceExhausted, "ResourceExhaustedError", nullptr,
      "A memory or resource budget was exceeded.");
  set(C::kFailedPrecondition, "FailedPreconditionError", nullptr,
      "An operation in a state that does not allow it.");
  set(C::kCancelled, "CancelledError", nullptr, "Work that was cancelled.");
  set(C::kInternal, "InternalError", nullptr, "A bug in Kiln.");
}

void ThrowStatus(const absl::Status& status) {
  if (PyObject* carried = CarriedException(status)) {
    // The exception object raised by the Python function, with its __traceback__: the
    // consumer sees the frames of the function that failed.
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(carried));
    Py_INCREF(type);
    Py_INCREF(carried);
    PyErr_Restore(type, carried, PyException_GetTraceback(carried));
    throw py::error_already_set();
  }
  Raise(ClassFor(status.code()), status);
}

void ThrowStatusAs(absl::StatusCode code, const absl::Status& status) {
  if (CarriedException(status) != nullptr) ThrowStatus(status);
  Raise(ClassFor(code), status);
}

void ThrowFileStatus(const absl::Status& status) {
  if (CarriedException(status) == nullptr && (status.code() == absl::StatusCode::kInvalidArgument ||
                                              status.code() == absl::StatusCode::kOutOfRange)) {
    Raise(ClassFor(absl::StatusCode::kDataLoss), status);
  }
  ThrowStatus(status);
}

absl::Status StatusFromPythonError(py::error_already_set& error) {
  py::object value = error.value();
  // The frames of the failed call: kept on the object, which is all that travels.
  if (error.trace() && value) PyException_SetTraceback(value.ptr(), error.trace().ptr());
  std::string message = py::str(value).cast<std::string>();
  std::string type_name = py::str(error.type().attr("__name__")).cast<std::string>();
  absl::Status status(absl::StatusCode::kUnknown,
                      message.empty() ? type_name : type_name + ": " + message);
  auto* held = new HeldException{value.release().ptr()};
  status.SetPayload(
      kPythonExceptionUrl,
      absl::MakeCordFromExternal(
          absl::string_view(reinterpret_cast<const char*>(&held->object), sizeof(PyObject*)),
          [held] {
            DecRefWithGil(held->object);
            delete held;
          }));
  return status;
}

namespace {

// ScopedPythonCall's count, and the flag the atexit handler sets.
struct PythonCalls {
  std::mutex mu;
  std::condition_variable idle;
  int64_t in_flight = 0;
  bool exiting = false;
};
PythonCalls& Calls() {
  static PythonCalls* calls = new PythonCalls;  // never destroyed: used by threads at exit
  return *calls;
}

bool Exiting() {
  PythonCalls& calls = Calls();
  std::lock_guard<std::mutex> lock(calls.mu);
  return calls.exiting;
}

// Registered with Python's atexit (run with the GIL held, before finalization): refuses new
// calls, then waits for those in flight, without the GIL, which they need to return.
void WaitForPythonCallsAtExit() {
  PythonCalls& calls = Calls();
  {
    std::lock_guard<std::mutex> lock(calls.mu);
    calls.exiting = true;
  }
  py::gil_scoped_release nogil;
  std::unique_lock<std::mutex> lock(calls.mu);
  calls.idle.wait(lock, [&] { return calls.in_flight == 0; });
}

}  // namespace

ScopedPythonCall::ScopedPythonCall() {
  PythonCalls& calls = Calls();
  std::lock_guard<std::mutex> lock(calls.mu);
  entered_ = !calls.exiting;
  if (entered_) ++calls.in_flight;
}

ScopedPythonCall::~ScopedPythonCall() {
  if (!entered_) return;
  PythonCalls& calls = Calls();
  std::lock_guard<std::mutex> lock(calls.mu);
  if (--calls.in_flight == 0) calls.idle.notify_all();
}

absl::Status InterpreterExiting() {
  return absl::CancelledError("the Python interpreter is exiting: no more Python calls");
}

void DecRefWithGil(PyObject* object) {
  if (object == nullptr || _Py_IsFinalizing() || Exiting()) return;
  PyGILState_STATE state = PyGILState_Ensure();
  Py_DECREF(object);
  PyGILState_Release(state);
}

}  // namespace kiln::python
