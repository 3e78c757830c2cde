// Serving's names for the TensorProto codec of kiln_formats (one codec, shared with the
// TensorFlow importer; see kiln/data/formats/tensor_proto.h for the request rules).
#pragma once

#include "kiln/data/formats/tensor_proto.h"

namespace kiln::serving {

using data::formats::DataTypeEnumName;
using data::formats::DTypeFromProto;
using data::formats::ShapeToProto;
using data::formats::TensorFromProto;
using data::formats::TensorToProto;
using data::formats::ToTensorProto;
using data::formats::ToTfDataType;

}  // namespace kiln::serving
