// kiln.data's native half: kiln::data::Dataset and Iterator, the built-in element functions,
// and Python callables as map functions, predicates, dataset functions and generators.
// kiln/data.py gives these tf.data's Python names and argument conventions.
#include <malloc.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common.h"
#include "kiln/data/dataset.h"
#include "kiln/data/formats/functions.h"

namespace kiln::python {
namespace {

using data::Dataset;
using data::Element;

// Owns one reference to a Python object that C++ threads carry around (inside std::function
// copies) without the GIL; the reference is dropped taking the GIL.
class PyRef {
 public:
  explicit PyRef(py::object object) : object_(object.release().ptr()) {}
  ~PyRef() { DecRefWithGil(object_); }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  py::handle get() const { return object_; }

 private:
  PyObject* object_;
};

// Runs `body` (which calls Python, holding the GIL) and turns what it raises into a status
// that carries the exception, so that it reaches the consumer with its traceback.
template <typename T, typename Body>
absl::StatusOr<T> CallPython(Body&& body) {
  try {
    return body();
  } catch (py::error_already_set& error) {
    return StatusFromPythonError(error);
  } catch (py::builtin_exception& error) {  // a TypeError from converting the result
    error.set_error();
    py::error_already_set raised;
    return StatusFromPythonError(raised);
  }
}

// Calls `fn` with an element the way tf.data does: fn(a, b) for a tuple, fn(x) for one value
// or a dict.
py::object CallWithElement(py::handle fn, Element&& element) {
  const bool spread = !element.names && element.size() > 1;
  py::object value = ElementToPython(std::move(element), py::handle());
  if (spread) return fn(*py::reinterpret_borrow<py::tuple>(value));
  return fn(value);
}

data::MapFn PythonMapFn(std::shared_ptr<PyRef> fn) {
  return [fn](Element in) -> absl::StatusOr<Element> {
    ScopedPythonCall call;
    if (!call.entered()) return InterpreterExiting();
    // Everything that touches Python objects, including their destruction, in this scope.
    py::gil_scoped_acquire gil;
    return CallPython<Element>([&]() -> absl::StatusOr<Element> {
      py::object out = CallWithElement(fn->get(), std::move(in));
      return ElementFromPython(out, Borrow::kCopy);
    });
  };
}

data::PredicateFn PythonPredicate(std::shared_ptr<PyRef> fn) {
  return [fn](const Element& in) -> absl::StatusOr<bool> {
    ScopedPythonCall call;
    if (!call.entered()) return InterpreterExiting();
    py::gil_scoped_acquire gil;
    return CallPython<bool>([&]() -> absl::StatusOr<bool> {
      Element copy = in;  // the predicate sees views of the element's tensors (read-only)
      py::object out = CallWithElement(fn->get(), std::move(copy));
      const int truth = PyObject_IsTrue(out.ptr());
      if (truth < 0) throw py::error_already_set();
      return truth != 0;
    });
  };
}

data::DatasetFn PythonDatasetFn(std::shared_ptr<PyRef> fn) {
  return [fn](Element in) -> absl::StatusOr<Dataset> {
    ScopedPythonCall call;
    if (!call.entered()) return InterpreterExiting();
    py::gil_scoped_acquire gil;
    return CallPython<Dataset>([&]() -> absl::StatusOr<Dataset> {
      py::object out = CallWithElement(fn->get(), std::move(in));
      if (!py::isinstance<Dataset>(out)) {
        throw py::type_error(
            absl::StrCat("a flat_map/interleave function must return a "
                         "kiln.data.Dataset, not ",
                         Py_TYPE(out.ptr())->tp_name));
      }
      return out.cast<Dataset>();
    });
  };
}

// `make_iterator` (a Python callable returning an iterable) is called once per kiln iterator,
// like tf.data.Dataset.from_generator's generator.
std::function<data::Generator()> PythonGenerator(std::shared_ptr<PyRef> make_iterator) {
  return [make_iterator]() -> data::Generator {
    ScopedPythonCall call;
    if (!call.entered()) {
      return []() -> absl::StatusOr<std::optional<Element>> { return InterpreterExiting(); };
    }
    py::gil_scoped_acquire gil;
    absl::StatusOr<py::object> started =
        CallPython<py::object>([&]() -> absl::StatusOr<py::object> {
          return py::reinterpret_steal<py::object>(PyObject_GetIter(make_iterator->get()().ptr()));
        });
    if (started.ok() && !*started) {
      py::error_already_set error;
      started = StatusFromPythonError(error);
    }
    if (!started.ok()) {
      absl::Status error = started.status();
      return [error]() -> absl::StatusOr<std::optional<Element>> { return error; };
    }
    auto iterator = std::make_shared<PyRef>(*std::move(started));
    return [iterator]() -> absl::StatusOr<std::optional<Element>> {
      ScopedPythonCall call;
      if (!call.entered()) return InterpreterExiting();
      py::gil_scoped_acquire gil;
      return CallPython<std::optional<Element>>([&]() -> absl::StatusOr<std::optional<Element>> {
        PyObject* next = PyIter_Next(iterator->get().ptr());
        if (next == nullptr) {
          if (PyErr_Occurred()) throw py::error_already_set();
          return std::nullopt;
        }
        py::object value = py::reinterpret_steal<py::object>(next);
        absl::StatusOr<Element> element = ElementFromPython(value, Borrow::kCopy);
        if (!element.ok()) return element.status();
        return std::optional<Element>(*std::move(element));
      });
    };
  };
}

DType DTypeFromPython(py::handle dtype) {
  if (PyUnicode_Check(dtype.ptr())) {
    const std::string name = dtype.cast<std::string>();
    if (name == "string" || name == "str" || name == "bytes") return DType::kString;
    absl::StatusOr<DType> kiln_name = DTypeFromName(name);  // TF's names: "float", "double"
    if (kiln_name.ok()) return *kiln_name;
  }
  if (dtype.ptr() == reinterpret_cast<PyObject*>(&PyBytes_Type) ||
      dtype.ptr() == reinterpret_cast<PyObject*>(&PyUnicode_Type)) {
    return DType::kString;
  }
  py::dtype numpy = py::dtype::from_args(py::reinterpret_borrow<py::object>(dtype));
  // A zero-element array of the dtype converts through the same table as data does.
  absl::StatusOr<Tensor> probe =
      TensorFromPython(py::array(numpy, std::vector<py::ssize_t>{0}), Borrow::kCopy);
  if (!probe.ok()) ThrowStatus(probe.status());
  return probe->dtype();
}

data::formats::Component ComponentFromPython(py::handle component) {
  if (PyUnicode_Check(component.ptr()))
    return data::formats::Component(component.cast<std::string>());
  if (PyLong_Check(component.ptr())) return data::formats::Component(component.cast<int>());
  throw py::type_error("a component is an int (position) or a str (name)");
}

// A built-in element function (kiln.data.functions): runs in C++ without the GIL.
struct NativeFunction {
  data::MapFn fn;
  std::string description;
};

// Builds a dataset and raises its construction error at once (tf.data raises when a
// transformation is applied, not when iteration starts).
Dataset Checked(Dataset ds) {
  if (!ds.ok()) ThrowStatus(ds.status());
  return ds;
}

Tensor TensorArg(py::handle value, const char* what) {
  absl::StatusOr<Tensor> t = TensorFromPython(value, Borrow::kCopy);
  if (!t.ok()) {
    throw py::value_error(absl::StrCat(what, ": ", t.status().message()));
  }
  return *std::move(t);
}

Element ElementArg(py::handle value, const char* what) {
  absl::StatusOr<Element> e = ElementFromPython(value, Borrow::kCopy);
  if (!e.ok()) throw py::value_error(absl::StrCat(what, ": ", e.status().message()));
  return *std::move(e);
}

// ---- the iterator ----

// A kiln iterator driven from Python. GetNext runs on a thread of its own while the Python
// thread waits with the GIL released, waking every kSignalCheckInterval to run Python's signal
// handlers: Ctrl-C raises KeyboardInterrupt even while the pipeline is stalled (a slow source,
// a blocked generator), which a GetNext called on the Python thread itself could not offer.
// An interrupted request is not lost: its element is what the next __next__ returns.
class PyIterator {
 public:
  static constexpr auto kSignalCheckInterval = std::chrono::milliseconds(50);

  PyIterator(std::unique_ptr<data::Iterator> iterator, bool torch)
      : shared_(std::make_shared<Shared>()) {
    shared_->iterator = std::move(iterator);
    if (torch) from_dlpack_ = py::module_::import("torch.utils.dlpack").attr("from_dlpack");
    thread_ = std::thread([shared = shared_] { Run(*shared); });
  }

  ~PyIterator() {
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->stop = true;
    }
    shared_->cv.notify_all();
    if (pending_) {
      // A GetNext interrupted by Ctrl-C may still be blocked; the thread finishes it and then
      // destroys the iterator on its own rather than holding up the interpreter.
      thread_.detach();
      return;
    }
    // The thread destroys the iterator, which joins worker threads that may be waiting for
    // the GIL (a Python map function in flight).
    py::gil_scoped_release nogil;
    thread_.join();
  }

  py::object Next() {
    Element element;
    bool end = false;
    absl::Status status = Pull(&element, &end);
    if (!status.ok()) ThrowStatus(status);
    if (end) throw py::stop_iteration();
    return ElementToPython(std::move(element), from_dlpack_);
  }

  data::PipelineStats Stats() const {
    std::lock_guard<std::mutex> lock(shared_->iterator_mu);
    return shared_->iterator->Stats();
  }

  void WriteTrace(const std::string& path) {
    std::lock_guard<std::mutex> lock(shared_->iterator_mu);
    Check(shared_->iterator->WriteTrace(path));
  }

  // Checkpoints. Both run between GetNext calls (under iterator_mu, with no request in flight),
  // which is what Iterator::SaveState / RestoreState require of their thread.
  py::bytes GetState() {
    CheckIdle("get_state");
    absl::StatusOr<std::string> state;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(shared_->iterator_mu);
      state = shared_->iterator->SaveState();
    }
    if (!state.ok()) ThrowStatus(state.status());
    return py::bytes(*state);
  }

  void SetState(const std::string& state) {
    CheckIdle("set_state");
    if (pulled_) {
      ThrowStatusAs(absl::StatusCode::kFailedPrecondition,
                    absl::FailedPreconditionError(
                        "set_state: the iterator has produced elements; restore into a new one "
                        "(iter(dataset).set_state(state))"));
    }
    absl::Status status;
    {
      // Restoring replays the inputs from their sources; Python functions may run meanwhile.
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(shared_->iterator_mu);
      status = shared_->iterator->RestoreState(state);
    }
    Check(status);
  }

  int64_t PeakBufferedBytes() const {
    std::lock_guard<std::mutex> lock(shared_->iterator_mu);
    return shared_->iterator->peak_buffered_bytes();
  }

 private:
  struct Shared {
    // `mu` guards the hand-off (the fields below it); `iterator_mu` serializes GetNext with
    // the other calls on the iterator (Stats, WriteTrace), which is not thread-safe.
    std::mutex mu;
    mutable std::mutex iterator_mu;
    std::condition_variable cv;
    bool requested = false, done = false, stop = false;
    absl::Status status;
    Element element;
    bool end = false;
    std::unique_ptr<data::Iterator> iterator;
  };

  static void Run(Shared& s) {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(s.mu);
        s.cv.wait(lock, [&] { return s.requested || s.stop; });
        if (!s.requested) break;
        s.requested = false;
      }
      Element element;
      bool end = false;
      absl::Status status;
      {
        std::lock_guard<std::mutex> lock(s.iterator_mu);
        status = s.iterator->GetNext(&element, &end);
      }
      {
        std::lock_guard<std::mutex> lock(s.mu);
        s.status = std::move(status);
        s.element = std::move(element);
        s.end = end;
        s.done = true;
      }
      s.cv.notify_all();
    }
    std::lock_guard<std::mutex> lock(s.iterator_mu);
    s.iterator.reset();
  }

  void CheckIdle(const char* what) const {
    if (pending_) {
      ThrowStatusAs(absl::StatusCode::kFailedPrecondition,
                    absl::FailedPreconditionError(absl::StrCat(
                        what, ": an interrupted next() is still in flight; call next() first")));
    }
  }

  absl::Status Pull(Element* element, bool* end) {
    pulled_ = true;
    if (!pending_) {
      {
        std::lock_guard<std::mutex> lock(shared_->mu);
        shared_->requested = true;
      }
      shared_->cv.notify_all();
      pending_ = true;
    }
    py::gil_scoped_release nogil;
    std::unique_lock<std::mutex> lock(shared_->mu);
    while (!shared_->done) {
      if (!shared_->cv.wait_for(lock, kSignalCheckInterval, [&] { return shared_->done; })) {
        lock.unlock();
        {
          py::gil_scoped_acquire gil;
          if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        }
        lock.lock();
      }
    }
    shared_->done = false;
    pending_ = false;
    *element = std::move(shared_->element);
    *end = shared_->end;
    return std::move(shared_->status);
  }

  std::shared_ptr<Shared> shared_;
  std::thread thread_;
  bool pending_ = false;  // a request was made whose result has not been taken
  bool pulled_ = false;   // next() was called: too late to restore a state
  py::object from_dlpack_;
};

}  // namespace

void RegisterData(py::module_& m) {
  py::module_ d = m.def_submodule("data", "kiln::data bindings (use kiln.data)");

  py::class_<NativeFunction>(d, "Function",
                             "A built-in element function: runs in C++ without the GIL.")
      .def("__repr__", [](const NativeFunction& f) { return f.description; });

  using data::formats::Component;
  d.def("parse_example", [](const std::vector<py::tuple>& features, py::handle component) {
    data::formats::ExampleSpec spec;
    std::string names;
    for (const py::tuple& f : features) {
      // (key, kind, dtype, shape, default): kind "fixed", "var" or "ragged".
      if (f.size() != 5) throw py::value_error("a feature is (key, kind, dtype, shape, default)");
      const std::string key = f[0].cast<std::string>();
      const std::string kind = f[1].cast<std::string>();
      const DType dtype = DTypeFromPython(f[2]);
      data::formats::FeatureSpec spec_one;
      if (kind == "fixed") {
        std::optional<Tensor> default_value;
        if (!f[4].is_none()) default_value = TensorArg(f[4], "default_value");
        if (default_value && default_value->dtype() != dtype) {
          absl::StatusOr<Tensor> cast = data::formats::Cast(*default_value, dtype);
          if (cast.ok()) default_value = *cast;
        }
        spec_one = data::formats::FeatureSpec::FixedLen(
            key, dtype, Shape(f[3].cast<std::vector<int64_t>>()), default_value);
      } else if (kind == "var") {
        spec_one = data::formats::FeatureSpec::VarLen(key, dtype);
      } else if (kind == "ragged") {
        spec_one = data::formats::FeatureSpec::Ragged(key, dtype);
      } else {
        throw py::value_error("feature kind must be fixed, var or ragged: " + kind);
      }
      spec.features.push_back(std::move(spec_one));
      absl::StrAppend(&names, names.empty() ? "" : ", ", key);
    }
    Check(spec.Validate());
    return NativeFunction{
        data::formats::ParseExampleFn(std::move(spec), ComponentFromPython(component)),
        absl::StrCat("parse_example(", names, ")")};
  });
  d.def("decode_jpeg", [](py::handle component, int channels, bool fast_dct) {
    if (channels != 0 && channels != 1 && channels != 3) {
      throw py::value_error("decode_jpeg: channels must be 0, 1 or 3");
    }
    Component c = ComponentFromPython(component);
    return NativeFunction{
        data::formats::DecodeJpegFn(c, {.channels = channels, .fast_dct = fast_dct}),
        "decode_jpeg(" + c.ToString() + ")"};
  });
  d.def("decode_png", [](py::handle component, int channels, py::handle dtype) {
    Component c = ComponentFromPython(component);
    return NativeFunction{data::formats::DecodePngFn(c, channels, DTypeFromPython(dtype)),
                          "decode_png(" + c.ToString() + ")"};
  });
  d.def("resize", [](py::handle component, int64_t height, int64_t width) {
    if (height < 1 || width < 1) throw py::value_error("resize: height and width must be >= 1");
    Component c = ComponentFromPython(component);
    return NativeFunction{data::formats::ResizeFn(c, height, width),
                          absl::StrCat("resize(", c.ToString(), ", ", height, ", ", width, ")")};
  });
  d.def("normalize", [](py::handle component, std::vector<float> mean, std::vector<float> stddev,
                        float scale) {
    if (mean.empty() || stddev.empty()) throw py::value_error("normalize: empty mean or stddev");
    for (float s : stddev) {
      if (s == 0) throw py::value_error("normalize: a stddev of 0");
    }
    Component c = ComponentFromPython(component);
    return NativeFunction{data::formats::NormalizeFn(c, std::move(mean), std::move(stddev), scale),
                          "normalize(" + c.ToString() + ")"};
  });
  d.def("cast", [](py::handle component, py::handle dtype) {
    Component c = ComponentFromPython(component);
    return NativeFunction{data::formats::CastFn(c, DTypeFromPython(dtype)),
                          "cast(" + c.ToString() + ")"};
  });
  d.def("one_hot", [](py::handle component, int64_t depth, float on, float off) {
    if (depth < 0) throw py::value_error("one_hot: depth must be >= 0");
    Component c = ComponentFromPython(component);
    return NativeFunction{data::formats::OneHotFn(c, depth, on, off),
                          absl::StrCat("one_hot(", c.ToString(), ", ", depth, ")")};
  });
  d.def("chain", [](const std::vector<NativeFunction>& functions) {
    std::vector<data::MapFn> fns;
    std::string description;
    for (const NativeFunction& f : functions) {
      fns.push_back(f.fn);
      absl::StrAppend(&description, description.empty() ? "" : ", ", f.description);
    }
    return NativeFunction{data::formats::Chain(std::move(fns)), "chain(" + description + ")"};
  });

  d.def("set_malloc_thresholds", [](int64_t mmap_threshold, int64_t trim_threshold) {
    // mallopt says 0 for a value glibc rejects.
    if (mmap_threshold < 0 || trim_threshold < 0 || mmap_threshold > INT32_MAX ||
        trim_threshold > INT32_MAX ||
        mallopt(M_MMAP_THRESHOLD, static_cast<int>(mmap_threshold)) != 1 ||
        mallopt(M_TRIM_THRESHOLD, static_cast<int>(trim_threshold)) != 1) {
      throw py::value_error(absl::StrCat("malloc thresholds out of range: mmap ", mmap_threshold,
                                         ", trim ", trim_threshold));
    }
  });

  py::class_<data::StageStats>(d, "StageStats")
      .def_readonly("name", &data::StageStats::name)
      .def_readonly("asynchronous", &data::StageStats::asynchronous)
      .def_readonly("elements", &data::StageStats::elements)
      .def_readonly("busy_ns", &data::StageStats::busy_ns)
      .def_readonly("wait_ns", &data::StageStats::wait_ns)
      .def_readonly("parallelism", &data::StageStats::parallelism)
      .def_readonly("buffer_capacity", &data::StageStats::buffer_capacity)
      .def_readonly("average_buffer_fill", &data::StageStats::average_buffer_fill)
      .def_readonly("buffered_bytes", &data::StageStats::buffered_bytes)
      .def_readonly("errors_ignored", &data::StageStats::errors_ignored)
      .def("__repr__", [](const data::StageStats& s) {
        return absl::StrCat("StageStats(", s.name, ", elements=", s.elements, ")");
      });
  py::class_<data::PipelineStats>(d, "PipelineStats")
      .def_readonly("stages", &data::PipelineStats::stages)
      .def_readonly("wall_ns", &data::PipelineStats::wall_ns)
      .def_readonly("consumer_wait_ns", &data::PipelineStats::consumer_wait_ns)
      .def_readonly("bottleneck", &data::PipelineStats::bottleneck)
      .def("__str__", &data::PipelineStats::ToString);

  py::class_<PyIterator>(d, "Iterator")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &PyIterator::Next)
      .def("stats", &PyIterator::Stats, py::call_guard<py::gil_scoped_release>(),
           "Per-stage statistics so far and the bottleneck stage.")
      .def("get_state", &PyIterator::GetState,
           "The iterator's position as bytes (positions and seeds, never buffered elements).")
      .def(
          "set_state",
          [](py::object self, const std::string& state) {
            self.cast<PyIterator&>().SetState(state);
            return self;
          },
          "Moves a new iterator of the same pipeline (in any process) to a position that "
          "get_state() returned; returns the iterator.")
      .def("write_trace", &PyIterator::WriteTrace, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("peak_buffered_bytes", &PyIterator::PeakBufferedBytes,
                             py::call_guard<py::gil_scoped_release>());

  py::class_<Dataset>(d, "Dataset")
      .def_static("range", [](int64_t start, int64_t stop,
                              int64_t step) { return Checked(Dataset::Range(start, stop, step)); })
      .def_static("from_tensors",
                  [](py::handle element) {
                    return Checked(Dataset::FromTensors(ElementArg(element, "from_tensors")));
                  })
      .def_static(
          "from_tensor_slices",
          [](py::handle element) {
            return Checked(Dataset::FromTensorSlices(ElementArg(element, "from_tensor_slices")));
          })
      .def_static("from_generator",
                  [](py::object make_iterator) {
                    return Checked(Dataset::FromGenerator(
                        PythonGenerator(std::make_shared<PyRef>(std::move(make_iterator)))));
                  })
      .def_static(
          "list_files",
          [](const std::vector<std::string>& patterns, bool shuffle, std::optional<uint64_t> seed) {
            Dataset ds = Dataset::ListFiles(patterns, shuffle, seed);
            // Its one failure is that nothing matched: a missing file, whatever the code says.
            if (!ds.ok()) ThrowStatusAs(absl::StatusCode::kNotFound, ds.status());
            return ds;
          })
      .def_static("tfrecord",
                  [](py::handle filenames, const std::string& compression, int64_t buffer_size,
                     int num_parallel_reads) {
                    Dataset ds = Dataset::TFRecord(Element({TensorArg(filenames, "filenames")}),
                                                   compression, buffer_size, num_parallel_reads);
                    return Checked(std::move(ds));
                  })
      .def_static("text_line",
                  [](py::handle filenames, const std::string& compression) {
                    Dataset ds = Dataset::TextLine(Element({TensorArg(filenames, "filenames")}),
                                                   compression);
                    return Checked(std::move(ds));
                  })
      .def_static("csv",
                  [](py::handle filenames, const std::vector<py::object>& record_defaults,
                     const std::string& compression, bool header, const std::string& delim,
                     bool use_quote_delim, const std::string& na_value,
                     const std::vector<int>& select_cols) {
                    Dataset::CsvOptions options;
                    for (const py::object& d : record_defaults) {
                      // A dtype (np.dtype, np.int32, str, bytes) makes the column required (an
                      // empty tensor of it); a value (0, 0.5, "") is the default of an optional
                      // column of its type.
                      if (py::isinstance<py::dtype>(d) || py::isinstance<py::type>(d)) {
                        options.record_defaults.push_back(Tensor(DTypeFromPython(d), Shape{0}));
                      } else {
                        options.record_defaults.push_back(TensorArg(d, "record_defaults"));
                      }
                    }
                    if (delim.size() != 1)
                      throw py::value_error("field_delim must be one character");
                    options.compression = compression;
                    options.header = header;
                    options.field_delim = delim[0];
                    options.use_quote_delim = use_quote_delim;
                    options.na_value = na_value;
                    options.select_cols = select_cols;
                    Dataset ds = Dataset::Csv(Element({TensorArg(filenames, "filenames")}),
                                              std::move(options));
                    return Checked(std::move(ds));
                  })
      .def_static(
          "zip",
          [](const std::vector<Dataset>& datasets) { return Checked(Dataset::Zip(datasets)); })
      .def("map_native",
           [](const Dataset& ds, const NativeFunction& fn, int parallel, bool deterministic) {
             return Checked(ds.Map(fn.fn, parallel, deterministic));
           })
      .def("map_python",
           [](const Dataset& ds, py::object fn, int parallel, bool deterministic) {
             return Checked(ds.Map(PythonMapFn(std::make_shared<PyRef>(std::move(fn))), parallel,
                                   deterministic));
           })
      .def("flat_map",
           [](const Dataset& ds, py::object fn) {
             return Checked(ds.FlatMap(PythonDatasetFn(std::make_shared<PyRef>(std::move(fn)))));
           })
      .def("interleave",
           [](const Dataset& ds, py::object fn, int cycle_length, int block_length, int parallel,
              bool deterministic) {
             return Checked(ds.Interleave(PythonDatasetFn(std::make_shared<PyRef>(std::move(fn))),
                                          cycle_length, block_length, parallel, deterministic));
           })
      .def("filter",
           [](const Dataset& ds, py::object fn) {
             return Checked(ds.Filter(PythonPredicate(std::make_shared<PyRef>(std::move(fn)))));
           })
      .def("batch", [](const Dataset& ds, int64_t size, bool drop, int parallel,
                       bool det) { return Checked(ds.Batch(size, drop, parallel, det)); })
      .def("padded_batch",
           [](const Dataset& ds, int64_t size,
              const std::vector<std::vector<int64_t>>& padded_shapes,
              const std::vector<py::object>& padding_values, bool drop) {
             std::vector<Shape> shapes;
             for (const auto& s : padded_shapes) shapes.emplace_back(s);
             std::vector<Tensor> values;
             for (const py::object& v : padding_values)
               values.push_back(TensorArg(v, "padding_values"));
             return Checked(ds.PaddedBatch(size, std::move(shapes), std::move(values), drop));
           })
      .def("unbatch", [](const Dataset& ds) { return Checked(ds.Unbatch()); })
      .def("shuffle",
           [](const Dataset& ds, int64_t buffer_size, std::optional<uint64_t> seed,
              bool reshuffle) { return Checked(ds.Shuffle(buffer_size, seed, reshuffle)); })
      .def("repeat", [](const Dataset& ds, int64_t count) { return Checked(ds.Repeat(count)); })
      .def("take", [](const Dataset& ds, int64_t count) { return Checked(ds.Take(count)); })
      .def("skip", [](const Dataset& ds, int64_t count) { return Checked(ds.Skip(count)); })
      .def("shard",
           [](const Dataset& ds, int64_t n, int64_t index) { return Checked(ds.Shard(n, index)); })
      .def("cache", [](const Dataset& ds,
                       const std::string& filename) { return Checked(ds.Cache(filename)); })
      .def("prefetch", [](const Dataset& ds, int64_t size) { return Checked(ds.Prefetch(size)); })
      .def("concatenate",
           [](const Dataset& ds, const Dataset& other) { return Checked(ds.Concatenate(other)); })
      .def("enumerate",
           [](const Dataset& ds, int64_t start) { return Checked(ds.Enumerate(start)); })
      .def("ignore_errors", [](const Dataset& ds) { return Checked(ds.IgnoreErrors()); })
      .def("cardinality", &Dataset::Cardinality)
      .def("make_iterator", [](const Dataset& ds, int cpu_budget, int64_t ram_budget_bytes,
                               bool autotune, const std::string& trace_path, bool torch) {
        data::Options options;
        options.cpu_budget = cpu_budget;
        options.ram_budget_bytes = ram_budget_bytes;
        options.autotune = autotune;
        options.trace_path = trace_path;
        absl::StatusOr<std::unique_ptr<data::Iterator>> it;
        {
          // Making the iterator may call a Python generator function (from_generator).
          py::gil_scoped_release nogil;
          it = ds.MakeIterator(options);
        }
        if (!it.ok()) ThrowStatus(it.status());
        return std::make_unique<PyIterator>(*std::move(it), torch);
      });
}

}  // namespace kiln::python
