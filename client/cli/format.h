// Human-readable renderings for the CLI: tables, numpy-like previews, sizes.
#ifndef TENSORMORPH_CLIENT_CLI_FORMAT_H_
#define TENSORMORPH_CLIENT_CLI_FORMAT_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/protobuf/message.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// "[4, 256]"
std::string ShapeText(absl::Span<const int64_t> shape);
// "1.5 KiB"
std::string BytesText(int64_t bytes);
// A progress bar on stderr, redrawn in place ("[===>  ] 3/10 tensors,
// 1.2 GB/4.0 GB, 2.5 s"), for a terminal. The template takes any progress
// message with tensors_done/total, bytes_done/total and elapsed_seconds
// (DiffProgress, CheckProgress).
// The line drawn: a carriage return, the bar, and the terminal's "erase to
// the end of the line" (ESC [ K), so that a line shorter than the one
// before it ("9.8 s" after "10.0 s"... or fewer digits of bytes) leaves
// none of the old characters behind.
std::string ProgressBarLine(int64_t tensors_done, int64_t tensors_total,
                            int64_t bytes_done, int64_t bytes_total,
                            double elapsed_seconds);
void DrawProgressBar(int64_t tensors_done, int64_t tensors_total,
                     int64_t bytes_done, int64_t bytes_total,
                     double elapsed_seconds);
template <typename P>
void DrawProgressBar(const P& p) {
  DrawProgressBar(p.tensors_done(), p.tensors_total(), p.bytes_done(),
                  p.bytes_total(), p.elapsed_seconds());
}
// Erases the bar, so what follows starts on a clean line.
void ClearProgressBar();
// A number in numpy's short form ("0.0123", "-1.5e-07", "nan").
std::string NumberText(double v);

// Left-aligned columns separated by two spaces; the first row is the header.
// Cells are written as the terminal filter writes them (controls as \xHH)
// and measured in characters, so names from files line up.
std::string Table(const std::vector<std::vector<std::string>>& rows);

// What a preview shows of an array: per dimension, every index when the
// dimension is at most 2*edge+1 long, else its first and last `edge`
// (elided: "..." between them).
struct PreviewPlan {
  std::vector<int64_t> shown_shape;  // per dimension: n, or 2*edge
  std::vector<bool> elided;
};
PreviewPlan PlanPreview(absl::Span<const int64_t> shape, int edge = 3);

// numpy-like nested brackets of the elements `plan` shows (row-major over
// plan.shown_shape), so that a preview needs only those: what
// ArrayPreview prints of the whole array.
std::string ShownArrayPreview(absl::Span<const float> shown,
                              const PreviewPlan& plan, int edge = 3);

// numpy-like nested brackets; dimensions longer than 2*edge+1 show `edge`
// items at each end around "...".
std::string ArrayPreview(absl::Span<const float> data,
                         absl::Span<const int64_t> shape, int edge = 3);

// protobuf's JSON mapping on one line, with default-valued fields printed
// and map entries sorted by key (the same message, the same text).
std::string ToJson(const google::protobuf::Message& message);

// Writes InspectScalars replies to one query as the JSON of one reply
// holding all their scalars, in order, and a newline: what ToJson prints
// for that reply, written a reply at a time, the scalars one at a time
// (client/cli/scalar_json, which prints what protobuf prints). 100,000 scalars
// are never held as one JSON string (protobuf's printer built one from a
// copy of the whole reply: 940 MB and 18 s).
class ScalarsJsonWriter {
 public:
  explicit ScalarsJsonWriter(std::ostream& out) : out_(out) {}
  // The first reply's fields other than its scalars are the document's.
  void Add(const v1::InspectScalarsResponse& response);
  // Closes the document. REQUIRES: Add was called.
  void Finish();

 private:
  std::ostream& out_;
  std::string tail_;    // what follows the scalars' array, once known
  std::string buffer_;  // up to 1 MiB of JSON, written when full
  bool first_ = true;
  bool any_scalar_ = false;
};

// The API's enums as people read them (the words before API v1 put on the
// wire): "safetensors", "row-major", "not supported", "by name", "GGUF ->
// Hugging Face names (llama)". A value this client does not know shows as
// "unknown (N)".
std::string FormatText(v1::CheckpointFormat format);
std::string LayoutText(v1::Layout layout);
std::string SupportStatusText(v1::SupportStatus status);
std::string PairingText(const v1::DiffSummary& summary);

// "1 tensor", "2 tensors", "0 tensors".
std::string Count(int64_t n, absl::string_view noun);

// `json` with every number token -0 (outside strings) written -0.0.
// protobuf's JSON parser reads -0 as the integer 0 and so drops the sign of
// a float or double field; -0.0 parses as the double -0.0. For text that
// ToJson printed and a protobuf parser reads back (diff-merge's part files),
// so that what comes back is bit for bit what was sent.
std::string KeepNegativeZeros(absl::string_view json);

// `text` as a JSON string literal, quoted and escaped.
std::string JsonString(absl::string_view text);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_FORMAT_H_
