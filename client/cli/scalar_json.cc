#include "client/cli/scalar_json.h"

#include <charconv>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "proto/json_print.h"

namespace tensormorph {
namespace {

// Writes the text of a JSON value a key at a time into a buffer of its own,
// appended to `out` when full and at the end (one append per few fields
// rather than two per field); the keys are literals, each with the comma or
// brace before it ("{\"index\":", ",\"flatIndex\":").
class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  ~Writer() { Flush(); }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  template <size_t N>
  void Key(const char (&key)[N]) {
    // Room for the key, then a value of up to kMaxJsonNumberChars and its
    // quotes.
    static_assert(N - 1 <= kRoom - kMaxJsonNumberChars - 2);
    Room();
    std::memcpy(p_, key, N - 1);
    p_ += N - 1;
  }

  // Each value below follows a Key, which left room for it.
  template <class T>
  void Int(T v) {
    p_ = std::to_chars(p_, p_ + kMaxJsonNumberChars, v).ptr;
  }

  // 64-bit integers are quoted in protobuf's mapping.
  template <class T>
  void Quoted(T v) {
    *p_++ = '"';
    p_ = std::to_chars(p_, p_ + kMaxJsonNumberChars, v).ptr;
    *p_++ = '"';
  }

  void Bool(bool v) { v ? Put("true") : Put("false"); }

  // A scalar's doubles repeat (scale, step and both neighbouring steps are
  // one number for an affine format; offset and range_min another): the
  // last few written are remembered by their bits and where their text is
  // in the buffer (until it is flushed).
  void Double(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    for (const Memo& m : memo_) {
      if (m.size > 0 && m.bits == bits) {
        // Whole texts copied, a constant size, through a copy of its own
        // (the two may overlap): a copy of a variable few bytes was a string
        // instruction that cost as much as the formatting saved. The room a
        // Key leaves covers them, and so it did where the text was written.
        char text[kMaxJsonNumberChars];
        std::memcpy(text, m.at, sizeof text);
        std::memcpy(p_, text, sizeof text);
        p_ += m.size;
        return;
      }
    }
    char* start = p_;
    p_ = WriteJsonDouble(v, p_);
    memo_[next_++ % kMemo] = {bits, start, static_cast<uint8_t>(p_ - start)};
  }

  void Float(float v) { p_ = WriteJsonFloat(v, p_); }

  // Short names that need no escapes (parameter names) go straight into
  // the buffer; the rest through the escaping printer.
  void String(std::string_view v) {
    if (v.size() <= kShortString && JsonStringIsVerbatim(v)) {
      if (static_cast<size_t>(buf_ + sizeof buf_ - p_) < v.size() + 2) Flush();
      *p_++ = '"';
      std::memcpy(p_, v.data(), v.size());
      p_ += v.size();
      *p_++ = '"';
      return;
    }
    Flush();
    AppendJsonString(v, out_);
  }

  // A repeated integer field; 64-bit ones quoted.
  template <class List>
  void IntList(const List& list) {
    *p_++ = '[';
    for (int i = 0; i < list.size(); ++i) {
      Room();
      if (i > 0) *p_++ = ',';
      if constexpr (sizeof(list.Get(i)) == 8) {
        Quoted(list.Get(i));
      } else {
        Int(list.Get(i));
      }
    }
    *p_++ = ']';
  }

 private:
  // Room for a key and a value, or a list item, and a closing bracket.
  static constexpr size_t kRoom = 64;
  // The longest string written in place.
  static constexpr size_t kShortString = 32;

  void Room() {
    if (static_cast<size_t>(buf_ + sizeof buf_ - p_) < kRoom) Flush();
  }
  void Flush() {
    out_->append(buf_, p_);
    p_ = buf_;
    for (Memo& m : memo_) m.size = 0;  // their text is gone
  }
  template <size_t N>
  void Put(const char (&text)[N]) {
    std::memcpy(p_, text, N - 1);
    p_ += N - 1;
  }

  struct Memo {
    uint64_t bits = 0;
    const char* at = nullptr;  // in buf_
    uint8_t size = 0;          // 0: empty
  };
  static constexpr int kMemo = 4;
  std::string* out_;
  // Not cleared (a Writer is made per scalar): a remembered number's copy
  // reads past its text into bytes it then overwrites or leaves beyond p_,
  // which are never appended.
  char buf_[1024];
  char* p_ = buf_;
  Memo memo_[kMemo];
  unsigned next_ = 0;
};

void AppendCodeword(const v1::GridCodeword& c, Writer& w) {
  w.Key("{\"gridIndex\":");
  w.Int(c.grid_index());
  w.Key(",\"gridSize\":");
  w.Int(c.grid_size());
  w.Key(",\"position\":");
  w.Int(c.position());
  w.Key(",\"entry\":");
  w.IntList(c.entry());
  w.Key(",\"signBits\":");
  w.Int(c.sign_bits());
  w.Key(",\"negated\":");
  w.Bool(c.negated());
  w.Key(",\"delta\":");
  w.Double(c.delta());
  w.Key(",\"subBlockScale\":");
  w.Double(c.sub_block_scale());
  w.Key("}");
}

void AppendSource(const v1::SourceScalar& s, Writer& w) {
  w.Key("{\"index\":");
  w.IntList(s.index());
  w.Key(",\"flatIndex\":");
  w.Quoted(s.flat_index());
  w.Key(",\"value\":");
  w.Double(s.value());
  w.Key(",\"error\":");
  w.Double(s.error());
  w.Key(",\"errorSteps\":");
  w.Double(s.error_steps());
  w.Key(",\"verdict\":");
  w.String(v1::ElementVerdict_Name(s.verdict()));
  w.Key(",\"boundSteps\":");
  w.Double(s.bound_steps());
  w.Key(",\"excessSteps\":");
  w.Double(s.excess_steps());
  w.Key(",\"chosenCodes\":");
  w.Bool(s.chosen_codes());
  w.Key("}");
}

}  // namespace

void AppendScalarJson(const v1::ScalarInspection& s, std::string* out) {
  Writer w(out);
  w.Key("{\"index\":");
  w.IntList(s.index());
  w.Key(",\"flatIndex\":");
  w.Quoted(s.flat_index());
  w.Key(",\"rawCode\":");
  w.Quoted(s.raw_code());
  w.Key(",\"rawBits\":");
  w.Quoted(s.raw_bits());
  w.Key(",\"codeBits\":");
  w.Int(s.code_bits());
  w.Key(",\"codeIsFloat\":");
  w.Bool(s.code_is_float());
  w.Key(",\"block\":");
  w.Quoted(s.block());
  w.Key(",\"subBlock\":");
  w.Int(s.sub_block());
  w.Key(",\"scale\":");
  w.Double(s.scale());
  w.Key(",\"zeroPoint\":");
  w.Double(s.zero_point());
  w.Key(",\"offset\":");
  w.Double(s.offset());
  w.Key(",\"level\":");
  w.Double(s.level());
  w.Key(",\"step\":");
  w.Double(s.step());
  w.Key(",\"stepBelow\":");
  w.Double(s.step_below());
  w.Key(",\"stepAbove\":");
  w.Double(s.step_above());
  w.Key(",\"rangeMin\":");
  w.Double(s.range_min());
  w.Key(",\"rangeMax\":");
  w.Double(s.range_max());
  w.Key(",\"value\":");
  w.Float(s.value());
  w.Key(",\"params\":[");
  for (int i = 0; i < s.params_size(); ++i) {
    const v1::Param& p = s.params(i);
    if (i > 0) w.Key(",");
    w.Key("{\"name\":");
    w.String(p.name());
    w.Key(",\"value\":");
    w.Double(p.value());
    w.Key("}");
  }
  w.Key("],\"group\":");
  w.Quoted(s.group());
  // Message fields only when set, in their place (protobuf's mapping).
  if (s.has_codeword()) {
    w.Key(",\"codeword\":");
    AppendCodeword(s.codeword(), w);
  }
  if (s.has_source()) {
    w.Key(",\"source\":");
    AppendSource(s.source(), w);
  }
  w.Key("}");
}

}  // namespace tensormorph
