// The importer's names for the TensorProto codec of kiln_formats (one codec, shared with
// serving; see kiln/data/formats/tensor_proto.h for the rules each function follows).
#pragma once

#include "kiln/data/formats/tensor_proto.h"

namespace kiln::import::tf {

using data::formats::FromTensorProto;
using data::formats::FromTfDataType;
using data::formats::FromTfShape;
using data::formats::FullyDefinedShape;
using data::formats::PartialShape;
using data::formats::TfDataTypeName;
using data::formats::ToTensorProto;
using data::formats::ToTfDataType;

}  // namespace kiln::import::tf
