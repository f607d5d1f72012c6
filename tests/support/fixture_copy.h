// Copies of the shared safetensors fixtures that tests may alter: a config
// value of another type, a companion tensor stored at another width.
#ifndef TENSORMORPH_TESTS_SUPPORT_FIXTURE_COPY_H_
#define TENSORMORPH_TESTS_SUPPORT_FIXTURE_COPY_H_

#include <functional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/support/safetensors_writer.h"

namespace tensormorph::testing {

// A fresh directory holding the tensor files (*.safetensors and the shard
// index) of fixture `safetensors/<name>`, and none of its configs.
std::string CopyFixtureTensors(const std::string& name);
// Copies every file of fixture `safetensors/<name>` into `dir`, configs too.
void CopyFixtureInto(const std::string& name, const std::string& dir);

// The parsed JSON of `path`; aborts on failure.
nlohmann::json ReadJson(const std::string& path);
void WriteJson(const std::string& path, const nlohmann::json& j);

// Reads the safetensors file `path`, lets `edit` change its tensors, and
// writes it back (as BuildSafetensors lays files out). Aborts on a file it
// cannot read.
void EditSafetensors(const std::string& path,
                     const std::function<void(std::vector<StTensor>&)>& edit);

// The little-endian bytes of `values` as safetensors integer dtype `dtype`
// ("I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64"), truncated to the
// width.
std::string IntBytes(const std::vector<int64_t>& values,
                     const std::string& dtype);
// The values of an integer tensor (as IntBytes writes them).
std::vector<int64_t> IntValues(const StTensor& t);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_FIXTURE_COPY_H_
