// A map function that can write its result's largest component straight into the memory its
// consumer gives it: the slot of the batch it will be part of.
//
// A Map followed by a Batch runs as one stage (map_and_batch_fusion) that copies each result
// into its batch slot. For an image pipeline that copy is a 588 KiB read and write per image
// (and the page faults of a fresh tensor for each result); a function that writes into the
// slot directly saves both. Dataset::Map takes a MapIntoFn like any MapFn (it is one: call
// operator()); the fused map-and-batch stage finds it with MapFn::target<MapIntoFn>() and
// calls `into` with an allocator for the slot. Any other consumer calls `fn`.
//
// data::formats::Chain returns one when its last function can write into a given tensor
// (decode_jpeg -> resize [-> normalize], fused; see functions.h).
#pragma once

#include <functional>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "kiln/data/element.h"

namespace kiln::data {

// Returns the tensor that component `component` of the result must be written into: `dtype`
// and `shape` as the function will produce them (a view of the batch slot), or an error when
// they do not fit the batch, which the function returns as its own. Call it at most once per
// component and call. A function may still return a component elsewhere (it is then copied).
using SlotAllocator =
    absl::FunctionRef<absl::StatusOr<Tensor>(int component, DType dtype, const Shape& shape)>;

struct MapIntoFn {
  MapFn fn;  // the plain function
  // The same function, writing what it can into allocate()'s tensors. Must compute exactly
  // what fn computes.
  std::function<absl::StatusOr<Element>(Element, SlotAllocator allocate)> into;

  absl::StatusOr<Element> operator()(Element element) const { return fn(std::move(element)); }
};

}  // namespace kiln::data
