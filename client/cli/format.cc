#include "client/cli/format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/scalar_json.h"
#include "client/cli/terminal_text.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/type_resolver_util.h"

namespace tensormorph {

std::string ShapeText(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string BytesText(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrCat(bytes, " B")
                : absl::StrFormat("%.1f %s", v, units[u]);
}

std::string NumberText(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // printf's %.6g (the standard defines to_chars' so), without printf.
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v,
                                        std::chars_format::general, 6)
                              .ptr);
}

namespace {

// The columns `text` takes: a character a column (a UTF-8 continuation
// byte adds none).
size_t Columns(absl::string_view text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

}  // namespace

std::string Table(const std::vector<std::vector<std::string>>& rows) {
  // Measured as the terminal will show them: a control in a name from a
  // file is written as \xHH (terminal_text.h), four columns, not one.
  std::vector<std::vector<std::string>> shown = rows;
  std::vector<size_t> widths;
  for (auto& row : shown) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      row[i] = EscapeTerminalControls(row[i]);
      widths[i] = std::max(widths[i], Columns(row[i]));
    }
  }
  std::string out;
  for (const auto& row : shown) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) {
        line.append(widths[i] - Columns(row[i]) + 2, ' ');
      }
    }
    out += line + "\n";
  }
  return out;
}

PreviewPlan PlanPreview(absl::Span<const int64_t> shape, int edge) {
  PreviewPlan plan;
  for (int64_t n : shape) {
    const bool elided = n > 2 * int64_t{edge} + 1;
    plan.shown_shape.push_back(elided ? 2 * int64_t{edge} : n);
    plan.elided.push_back(elided);
  }
  return plan;
}

namespace {

// The row-major stride of `dim` in an array of `shape`.
int64_t Stride(absl::Span<const int64_t> shape, size_t dim) {
  int64_t stride = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) stride *= shape[d];
  return stride;
}

// The width of the widest value shown, so that columns line up.
size_t ShownWidth(absl::Span<const float> shown) {
  size_t w = 0;
  for (float v : shown) w = std::max(w, NumberText(v).size());
  return w;
}

void Preview(absl::Span<const float> shown, const PreviewPlan& plan, size_t dim,
             int64_t offset, int edge, size_t width, std::string* out) {
  const int64_t stride = Stride(plan.shown_shape, dim);
  const int64_t n = plan.shown_shape[dim];
  const bool innermost = dim + 1 == plan.shown_shape.size();
  const std::string sep = innermost ? ", " : ",\n" + std::string(dim + 1, ' ');
  *out += "[";
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) *out += sep;
    if (plan.elided[dim] && i == edge) {
      *out += "...";
      *out += sep;
    }
    if (innermost) {
      *out += absl::StrFormat("%*s", static_cast<int>(width),
                              NumberText(shown[offset + i]));
    } else {
      Preview(shown, plan, dim + 1, offset + i * stride, edge, width, out);
    }
  }
  *out += "]";
}

// Copies the elements `plan` shows of the whole array `data` of `shape`,
// row-major over plan.shown_shape.
void GatherShown(absl::Span<const float> data, absl::Span<const int64_t> shape,
                 const PreviewPlan& plan, size_t dim, int64_t offset, int edge,
                 std::vector<float>* shown) {
  const int64_t stride = Stride(shape, dim);
  for (int64_t i = 0; i < plan.shown_shape[dim]; ++i) {
    const int64_t at =
        plan.elided[dim] && i >= edge ? shape[dim] - 2 * int64_t{edge} + i : i;
    if (dim + 1 == shape.size()) {
      shown->push_back(data[offset + at]);
    } else {
      GatherShown(data, shape, plan, dim + 1, offset + at * stride, edge,
                  shown);
    }
  }
}

}  // namespace

std::string ShownArrayPreview(absl::Span<const float> shown,
                              const PreviewPlan& plan, int edge) {
  for (int64_t d : plan.shown_shape) {
    if (d == 0) return "[]";
  }
  if (plan.shown_shape.empty()) return NumberText(shown[0]);
  std::string out;
  Preview(shown, plan, 0, 0, edge, ShownWidth(shown), &out);
  return out;
}

std::string ArrayPreview(absl::Span<const float> data,
                         absl::Span<const int64_t> shape, int edge) {
  const PreviewPlan plan = PlanPreview(shape, edge);
  std::vector<float> shown;
  for (int64_t d : shape) {
    if (d == 0) return "[]";
  }
  if (shape.empty()) return NumberText(data[0]);
  GatherShown(data, shape, plan, 0, 0, edge, &shown);
  return ShownArrayPreview(shown, plan, edge);
}

std::string ToJson(const google::protobuf::Message& message) {
  namespace pb = google::protobuf;
  // MessageToJsonString converts the binary form, whose map entries come in
  // hash order: serialized deterministically, maps come sorted by key and
  // the same message prints the same way on every run.
  static constexpr char kPrefix[] = "type.googleapis.com";
  static pb::util::TypeResolver* const resolver =
      pb::util::NewTypeResolverForDescriptorPool(
          kPrefix, pb::DescriptorPool::generated_pool());
  std::string binary;
  {
    pb::io::StringOutputStream stream(&binary);
    pb::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    (void)message.SerializeToCodedStream(&coded);
  }
  pb::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string out;
  (void)pb::util::BinaryToJsonString(
      resolver,
      absl::StrCat(kPrefix, "/", message.GetDescriptor()->full_name()), binary,
      &out, options);
  return out;
}

void ScalarsJsonWriter::Add(const v1::InspectScalarsResponse& response) {
  if (first_) {
    first_ = false;
    // The reply without its scalars prints `"scalars":[]` once, in its
    // place among the other fields; the scalars go between its brackets.
    // (Copied whole, once: a first reply's scalars cost about a
    // millisecond, and every field the message may gain stays in.)
    v1::InspectScalarsResponse head(response);
    head.clear_scalars();
    const std::string rest = ToJson(head);
    static constexpr absl::string_view kEmpty = "\"scalars\":[]";
    const size_t at = absl::string_view(rest).find(kEmpty);
    const size_t close = at == std::string::npos
                             ? rest.size() - 1  // not protobuf's mapping
                             : at + kEmpty.size() - 1;
    out_ << absl::string_view(rest).substr(0, close);
    tail_ = rest.substr(close);
  }
  // Into a buffer kept from reply to reply: its pages are faulted in once.
  buffer_.clear();
  for (const v1::ScalarInspection& s : response.scalars()) {
    if (any_scalar_) buffer_.push_back(',');
    any_scalar_ = true;
    AppendScalarJson(s, &buffer_);
    if (buffer_.size() >= (1 << 20)) {
      out_ << buffer_;
      buffer_.clear();
    }
  }
  out_ << buffer_;
}

void ScalarsJsonWriter::Finish() { out_ << tail_ << "\n"; }

namespace {
std::string Unknown(int value) { return absl::StrCat("unknown (", value, ")"); }
}  // namespace

std::string FormatText(v1::CheckpointFormat format) {
  switch (format) {
    case v1::CHECKPOINT_FORMAT_SAFETENSORS:
      return "safetensors";
    case v1::CHECKPOINT_FORMAT_GGUF:
      return "gguf";
    default:
      return Unknown(format);
  }
}

std::string LayoutText(v1::Layout layout) {
  if (layout == v1::LAYOUT_ROW_MAJOR) return "row-major";
  return Unknown(layout);
}

std::string SupportStatusText(v1::SupportStatus status) {
  switch (status) {
    case v1::SUPPORT_STATUS_SUPPORTED:
      return "supported";
    case v1::SUPPORT_STATUS_NOT_SUPPORTED:
      return "not supported";
    case v1::SUPPORT_STATUS_NOT_KNOWN:
      return "not known";
    default:
      return Unknown(status);
  }
}

std::string PairingText(const v1::DiffSummary& summary) {
  switch (summary.pairing()) {
    case v1::DIFF_PAIRING_BY_NAME:
      return "by name";
    case v1::DIFF_PAIRING_GGUF_TO_HF_NAMES:
      return absl::StrCat("GGUF -> Hugging Face names (",
                          summary.pairing_architecture(), ")");
    default:
      return Unknown(summary.pairing());
  }
}

std::string Count(int64_t n, absl::string_view noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (c < 0x20) {
          absl::StrAppend(&out, "\\u00", absl::Hex(c, absl::kZeroPad2));
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// ESC [ K: erase from the cursor to the end of the line.
constexpr char kEraseToEndOfLine[] = "\x1b[K";

std::string ProgressBarLine(int64_t tensors_done, int64_t tensors_total,
                            int64_t bytes_done, int64_t bytes_total,
                            double elapsed_seconds) {
  const double frac =
      bytes_total > 0 ? static_cast<double>(bytes_done) / bytes_total : 0;
  const int width = 30, filled = static_cast<int>(frac * width);
  std::string bar(filled, '=');
  if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
  return absl::StrFormat("\r[%s] %d/%d tensors, %s/%s, %.1f s%s", bar,
                         tensors_done, tensors_total, BytesText(bytes_done),
                         BytesText(bytes_total), elapsed_seconds,
                         kEraseToEndOfLine);
}

void DrawProgressBar(int64_t tensors_done, int64_t tensors_total,
                     int64_t bytes_done, int64_t bytes_total,
                     double elapsed_seconds) {
  const std::string line = ProgressBarLine(
      tensors_done, tensors_total, bytes_done, bytes_total, elapsed_seconds);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

void ClearProgressBar() {
  std::fprintf(stderr, "\r%s", kEraseToEndOfLine);
  std::fflush(stderr);
}

namespace {

// Whether json[i] begins a value: the last character before it that is not
// white space opens an array or follows a key or an element (not the e of
// an exponent, "1e-0" being no -0).
bool StartsAValue(absl::string_view json, size_t i) {
  while (i > 0 && absl::ascii_isspace(json[i - 1])) --i;
  return i == 0 || json[i - 1] == ':' || json[i - 1] == ',' ||
         json[i - 1] == '[';
}

}  // namespace

std::string KeepNegativeZeros(absl::string_view json) {
  std::string out;
  out.reserve(json.size());
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    out += c;
    if (in_string) {
      if (c == '\\' && i + 1 < json.size()) {
        out += json[++i];  // an escaped character, a quote included
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '-' && i + 1 < json.size() && json[i + 1] == '0' &&
               StartsAValue(json, i)) {
      // The token ends after its 0: no fraction, exponent or digit follows.
      const size_t end = i + 2;
      const bool bare = end == json.size() || json[end] == ',' ||
                        json[end] == '}' || json[end] == ']' ||
                        absl::ascii_isspace(json[end]);
      if (bare) {
        out += "0.0";
        ++i;
      }
    }
  }
  return out;
}

}  // namespace tensormorph
