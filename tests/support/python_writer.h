// The numpy fixture writers of tests/python/writers, run from C++ tests.
#ifndef TENSORMORPH_TESTS_SUPPORT_PYTHON_WRITER_H_
#define TENSORMORPH_TESTS_SUPPORT_PYTHON_WRITER_H_

#include <string>

namespace tensormorph::testing {

// Runs `/usr/bin/python3 -B tests/python/writers/<script> <dir>` once per test
// binary and script, into a fresh temporary directory, and returns that
// directory. Aborts when the writer fails (its stderr printed).
const std::string& WriterOutput(const std::string& script);

// Copies the tree under `from` into a fresh temporary directory and returns
// it (a fixture to change one file of).
std::string CopyDir(const std::string& from);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_PYTHON_WRITER_H_
