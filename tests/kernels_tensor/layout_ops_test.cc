#include "tests/kernels_tensor/test_util.h"
