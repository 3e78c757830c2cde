// kiln._kiln: the native extension behind the `kiln` package (kiln/__init__.py imports it).
#include "common.h"

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "Kiln's native extension; import kiln, kiln.data and kiln.runtime instead.";
  kiln::python::RegisterErrors(m);
  kiln::python::RegisterData(m);
  kiln::python::RegisterRuntime(m);
}
