// `kiln data bench --experiment=images`: a real image input pipeline (TFRecord shards of
// tf.Examples with JPEGs -> parse -> decode -> resize 224x224 -> normalize -> batch 64 ->
// prefetch) against the bound measured in the same run (the single-thread rate of the same
// per-image work with no pipeline, times the cores), optionally against PyTorch's DataLoader
// over the same images (--peer).
#pragma once

#include <string>
#include <vector>

namespace kiln::tool {

// `args`: the bench command's arguments (--experiment and --json are accepted and ignored
// here). Returns the process exit code.
int RunImagesExperiment(const std::vector<std::string>& args, bool json);

}  // namespace kiln::tool
