// Kiln's copies of TF Serving's protos must encode as TF Serving's do: a client or tool that
// writes the binary form (not only text format) relies on the field numbers. Each check pins
// a field's number to TF Serving's (tensorflow_serving/servables/tensorflow/
// session_bundle_config.proto) through its wire tag.
#include <string>

#include "gtest/gtest.h"
#include "tensorflow_serving/servables/tensorflow/session_bundle_config.pb.h"

namespace kiln::serving {
namespace {

// The bytes of a message with one wrapper field set: tag (field << 3 | 2), length, then the
// wrapper's own field 1.
TEST(ProtoWireTest, BatchingParametersFieldNumbersAreTfServings) {
  tensorflow::serving::BatchingParameters p;
  p.mutable_max_enqueued_batches()->set_value(7);
  EXPECT_EQ(p.SerializeAsString(), std::string("\x1a\x02\x08\x07", 4));  // field 3
  p.Clear();
  p.mutable_thread_pool_name()->set_value("p");
  EXPECT_EQ(p.SerializeAsString(), std::string("\x2a\x03\x0a\x01p", 5));  // field 5
  p.Clear();
  p.mutable_num_batch_threads()->set_value(2);
  EXPECT_EQ(p.SerializeAsString(), std::string("\x22\x02\x08\x02", 4));  // field 4
  p.Clear();
  p.add_allowed_batch_sizes(8);
  EXPECT_EQ(p.SerializeAsString(), std::string("\x32\x01\x08", 3));  // field 6, packed
}

}  // namespace
}  // namespace kiln::serving
