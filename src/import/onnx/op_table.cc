// The operators of ONNX's default domain (ai.onnx, opsets 1 to 21) that the importer knows.
#include "import/onnx/onnx_internal.h"
#include "kiln/import/onnx.h"

namespace kiln::import {
namespace onnx_internal {

const std::set<std::string>& KnownOnnxOpSet() {
  static const std::set<std::string> ops = {
      "Abs", "Acos", "Acosh", "Add", "AffineGrid", "And", "ArgMax", "ArgMin", "Asin", "Asinh",
      "Atan", "Atanh", "AveragePool", "BatchNormalization", "Bernoulli", "BitShift",
      "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "BlackmanWindow", "Cast",
      "CastLike", "Ceil", "Celu", "CenterCropPad", "Clip", "Col2Im", "Compress", "Concat",
      "ConcatFromSequence", "Constant", "ConstantOfShape", "Conv", "ConvInteger",
      "ConvTranspose", "Cos", "Cosh", "CumSum", "DFT", "DeformConv", "DepthToSpace",
      "DequantizeLinear", "Det", "Div", "Dropout", "DynamicQuantizeLinear", "Einsum", "Elu",
      "Equal", "Erf", "Exp", "Expand", "EyeLike", "Flatten", "Floor", "GRU", "Gather",
      "GatherElements", "GatherND", "Gelu", "Gemm", "GlobalAveragePool", "GlobalLpPool",
      "GlobalMaxPool", "Greater", "GreaterOrEqual", "GridSample", "GroupNormalization",
      "HammingWindow", "HannWindow", "HardSigmoid", "HardSwish", "Hardmax", "Identity", "If",
      "ImageScaler",
      "ImageDecoder", "InstanceNormalization", "IsInf", "IsNaN", "LRN", "LSTM",
      "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax", "Loop",
      "LpNormalization", "LpPool", "MatMul", "MatMulInteger", "Max", "MaxPool", "MaxRoiPool",
      "MaxUnpool", "Mean", "MeanVarianceNormalization", "MelWeightMatrix", "Min", "Mish", "Mod",
      "Mul", "Multinomial", "Neg", "NegativeLogLikelihoodLoss", "NonMaxSuppression", "NonZero",
      "Not", "OneHot", "Optional", "OptionalGetElement", "OptionalHasElement", "Or", "PRelu",
      "Pad", "Pow", "QLinearConv", "QLinearMatMul", "QuantizeLinear", "RNN", "RandomNormal",
      "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Range", "Reciprocal",
      "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
      "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "RegexFullMatch", "Relu",
      "Reshape", "Resize", "ReverseSequence", "RoiAlign", "Round", "STFT", "Scan", "Scatter",
      "ScatterElements", "ScatterND", "Selu", "SequenceAt", "SequenceConstruct",
      "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap",
      "Shape", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Size", "Slice", "Softmax",
      "SoftmaxCrossEntropyLoss", "Softplus", "Softsign", "SpaceToDepth", "Split",
      "SplitToSequence", "Sqrt", "Squeeze", "StringConcat", "StringNormalizer", "StringSplit",
      "Sub", "Sum", "Tan", "Tanh", "TfIdfVectorizer", "ThresholdedRelu", "Tile", "TopK",
      "Transpose", "Trilu", "Unique", "Unsqueeze", "Upsample", "Where", "Xor"};
  return ops;
}

}  // namespace onnx_internal

std::vector<std::string> KnownOnnxOps() {
  const auto& ops = onnx_internal::KnownOnnxOpSet();
  return {ops.begin(), ops.end()};
}

std::vector<std::string> ExpandedMicrosoftOps() {
  return {"BiasAdd",      "BiasGelu",  "FastGelu", "FusedMatMul", "Gelu",
          "LayerNormalization", "QuickGelu", "SimplifiedLayerNormalization",
          "SkipLayerNormalization", "SkipSimplifiedLayerNormalization"};
}

}  // namespace kiln::import
