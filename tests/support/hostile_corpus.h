// Every known attack class against the two file formats, as files: each
// breaks exactly one rule of an otherwise valid checkpoint. Shared by the
// live-server test and anything else that replays hostile input.
#ifndef TENSORMORPH_TESTS_SUPPORT_HOSTILE_CORPUS_H_
#define TENSORMORPH_TESTS_SUPPORT_HOSTILE_CORPUS_H_

#include <string>
#include <vector>

namespace tensormorph::testing {

struct HostileFile {
  std::string name;   // file name, with the format's extension
  std::string bytes;  // the whole file
  std::string rule;   // the refusal's `rule` (core/format/header_rule.h)
};

// The attack classes: counts and lengths near 2^64, dimension counts and
// products that overflow, removed and unknown type ids, bad alignments and
// offsets, safetensors header lengths, invalid UTF-8, nesting bombs,
// duplicate keys, bad shapes, overlaps, gaps, trailing bytes, sub-byte sizes.
std::vector<HostileFile> HostileCorpus();

// A valid GGUF file and a valid safetensors file, and every truncation of
// each before its data section (one file per cut; the rule is "truncated",
// or the rule of a count, length or range the rest cannot hold).
std::string ValidGgufBytes(uint64_t* header_end);
std::string ValidSafetensorsBytes(uint64_t* header_end);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_HOSTILE_CORPUS_H_
