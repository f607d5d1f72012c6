#include "server/proto_convert.h"

#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "core/compat.h"
#include "core/util/utf8.h"

namespace tensormorph {
namespace {

// File paths are shown relative to the checkpoint's directory: the server's
// absolute layout is not the client's business. A file name is any bytes
// but a proto3 string must be UTF-8: escaped (core/util/utf8.h).
std::string ShortPath(const Checkpoint& ckpt, const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return EscapeUtf8(slash == std::string::npos
                        ? absl::string_view(path)
                        : absl::string_view(path).substr(slash + 1));
}

// The identity (stat's device and inode) of a file on a local disk.
void SetIdentity(const struct stat& st, v1::FileIdentity* out) {
  out->set_device(static_cast<uint64_t>(st.st_dev));
  out->set_inode(static_cast<uint64_t>(st.st_ino));
}

// The directory holding the checkpoint's first file, by identity, where the
// files are on a local disk (GetCheckpointResponse.directory). Looked at
// through the checkpoint's access, as its files were: beneath the roots.
void FillDirectoryIdentity(const Checkpoint& ckpt,
                           v1::GetCheckpointResponse* out) {
  if (ckpt.files().empty() || ckpt.files()[0].mapping->remote()) return;
  const std::string& path = ckpt.files()[0].path;
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return;
  const absl::StatusOr<struct stat> st =
      ckpt.access().Stat(slash == 0 ? "/" : path.substr(0, slash));
  if (st.ok()) SetIdentity(*st, out->mutable_directory());
}

}  // namespace

v1::CheckpointFormat ToProto(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::kSafetensors:
      return v1::CHECKPOINT_FORMAT_SAFETENSORS;
    case CheckpointFormat::kGguf:
      return v1::CHECKPOINT_FORMAT_GGUF;
  }
  return v1::CHECKPOINT_FORMAT_UNSPECIFIED;
}

v1::SupportStatus SupportStatusToProto(absl::string_view status) {
  if (status == "supported") return v1::SUPPORT_STATUS_SUPPORTED;
  if (status == "not supported") return v1::SUPPORT_STATUS_NOT_SUPPORTED;
  if (status == "not known") return v1::SUPPORT_STATUS_NOT_KNOWN;
  return v1::SUPPORT_STATUS_UNSPECIFIED;
}

void FillCheckpointInfo(const Checkpoint& ckpt,
                        v1::GetCheckpointResponse* out) {
  out->set_format(ToProto(ckpt.format()));
  for (const Checkpoint::File& f : ckpt.files()) {
    v1::FileInfo* fi = out->add_files();
    fi->set_path(ShortPath(ckpt, f.path));
    fi->set_size_bytes(static_cast<int64_t>(f.mapping->size()));
    if (!f.mapping->remote()) {
      fi->mutable_identity()->set_device(f.mapping->identity().device);
      fi->mutable_identity()->set_inode(f.mapping->identity().inode);
    }
  }
  FillDirectoryIdentity(ckpt, out);
  out->set_tensor_count(static_cast<int64_t>(ckpt.tensors().size()));
  out->set_stored_tensor_count(
      static_cast<int64_t>(ckpt.stored_tensors().size()));
  out->set_total_bytes(static_cast<int64_t>(ckpt.total_bytes()));
  for (const std::string& c : ckpt.conventions()) out->add_conventions(c);
  for (const std::string& n : ckpt.notes()) out->add_notes(n);
  for (const Checkpoint::AbsentFile& f : ckpt.absent_files()) {
    out->add_absent_files(ShortPath(ckpt, f.path));
  }
  for (const auto& [key, value] : ckpt.quant_config()) {
    v1::ConfigField* f = out->add_quant_config();
    f->set_key(key);
    f->set_value(value);
  }
  for (const Checkpoint::ConfigFile& c : ckpt.config_files()) {
    v1::ConfigFile* f = out->add_config_files();
    f->set_name(c.name);
    f->set_json(c.json);
    f->set_truncated(c.truncated);
  }
  for (const MetadataEntry& m : ckpt.metadata()) {
    v1::MetadataEntry* e = out->add_metadata();
    e->set_key(m.key);
    e->set_type(m.type);
    e->set_value(m.value);
    if (m.type == "string") e->set_raw(m.raw);
    if (ckpt.files().size() > 1 && m.file_index >= 0 &&
        static_cast<size_t>(m.file_index) < ckpt.files().size()) {
      e->set_file(ShortPath(ckpt, ckpt.files()[m.file_index].path));
    }
  }
}

void FillEncoding(const EncodingInfo& info, v1::Encoding* out) {
  out->set_scheme(info.scheme);
  out->set_convention(info.convention);
  out->set_bits(info.bits);
  out->set_quantized(info.quantized);
  out->set_granularity(info.granularity);
  out->set_block_elems(info.block_elems);
  out->set_symmetric(info.symmetric);
  out->set_group_size(info.group_size);
  out->set_act_order(info.act_order);
  for (int64_t d : info.block_shape) out->add_block_shape(d);
  out->set_axis(info.axis);
}

void FillTensorInfo(const Checkpoint& ckpt, const LogicalTensor& t,
                    v1::TensorInfo* out) {
  out->set_name(t.name);
  int64_t stride = 1;
  out->mutable_strides()->Resize(static_cast<int>(t.shape.size()), 0);
  for (int d = static_cast<int>(t.shape.size()) - 1; d >= 0; --d) {
    out->set_strides(d, stride);
    stride *= t.shape[d];
  }
  for (int64_t d : t.shape) out->add_shape(d);
  out->set_layout(v1::LAYOUT_ROW_MAJOR);
  const EncodingInfo& info = t.encoding->info();
  FillEncoding(info, out->mutable_encoding());
  out->set_num_elements(t.num_elements);
  int64_t bytes = 0;
  for (const StoredTensor* p : t.encoding->parts()) {
    v1::StoredTensorInfo* s = out->add_parts();
    s->set_name(p->name);
    s->set_dtype(StoredDTypeName(*p));
    for (int64_t d : p->shape) s->add_shape(d);
    s->set_file(ShortPath(ckpt, ckpt.files()[p->file_index].path));
    s->set_offset(static_cast<int64_t>(p->offset));
    s->set_size_bytes(static_cast<int64_t>(p->nbytes));
    bytes += static_cast<int64_t>(p->nbytes);
  }
  out->set_stored_bytes(bytes);
  for (const BackendSupport& b : BackendSupportFor(info)) {
    v1::BackendSupport* c = out->add_compat();
    c->set_backend(b.backend);
    c->set_status(SupportStatusToProto(b.status));
    c->set_notes(b.notes);
    c->set_source(b.source);
  }
}

void FillScalar(const ScalarInfo& s, v1::ScalarInspection* out) {
  out->set_raw_code(s.code);
  out->set_raw_bits(s.code_bits_value);
  out->set_code_bits(s.code_width);
  out->set_code_is_float(s.code_is_float);
  out->set_block(s.block);
  out->set_sub_block(s.sub_block);
  out->set_group(s.group);
  out->set_scale(s.scale);
  out->set_zero_point(s.zero_point);
  out->set_offset(s.offset);
  out->set_level(s.level);
  out->set_step(s.step);
  out->set_step_below(s.step_below);
  out->set_step_above(s.step_above);
  out->set_range_min(s.range_min);
  out->set_range_max(s.range_max);
  out->set_value(s.value);
  if (s.codeword.index >= 0) {
    const GridCodeword& c = s.codeword;
    v1::GridCodeword* w = out->mutable_codeword();
    w->set_grid_index(c.index);
    w->set_grid_size(c.grid_size);
    w->set_position(c.position);
    for (int j = 0; j < c.dims; ++j) w->add_entry(c.entry[j]);
    w->set_sign_bits(c.sign_bits);
    w->set_negated(c.negated);
    w->set_delta(c.delta);
    w->set_sub_block_scale(c.sub_block_scale);
  }
  for (int i = 0; i < s.num_params; ++i) {
    v1::Param* p = out->add_params();
    p->set_name(std::string(s.params[i].name));
    p->set_value(s.params[i].value);
  }
}

DiffPlanKey DiffPlanKeyOf(const v1::QuantDiffRequest& request, int32_t top_k,
                          int32_t worst_groups, int32_t count) {
  DiffPlanKey key;
  key.checkpoint = request.checkpoint();
  key.reference = request.reference();
  key.filter = request.filter();
  key.fail_on.assign(request.fail_on().begin(), request.fail_on().end());
  key.top_k = top_k;
  key.worst_groups = worst_groups;
  key.count = count;
  key.imatrix = request.imatrix();
  return key;
}

DiffSummaryEntry DiffSummaryEntryOf(const v1::TensorDiffReport& report) {
  return {report.name(), report.max_err_steps(), report.flagged()};
}

void FillRankedLists(RankedLists lists, v1::DiffSummary* out) {
  out->clear_worst_tensors();
  for (std::string& name : lists.worst_tensors) {
    out->add_worst_tensors(std::move(name));
  }
  out->clear_flagged();
  for (std::string& name : lists.flagged) out->add_flagged(std::move(name));
}

void FillWeightedTotals(const std::vector<v1::TensorDiffReport>& reports,
                        v1::DiffSummary* out) {
  std::vector<WeightedEntry> entries;
  entries.reserve(reports.size());
  for (const v1::TensorDiffReport& r : reports) {
    entries.push_back({r.name(), static_cast<int>(r.imatrix_use()),
                       r.imatrix_note(), r.weighted_sq_err(),
                       r.weighted_source_energy()});
  }
  WeightedTotals t = SumWeighted(std::move(entries));
  out->set_imatrix_weighted(t.weighted);
  out->set_weighted_sq_err(t.sq_err);
  out->set_weighted_source_energy(t.energy);
  out->set_weighted_sqnr_db(t.sqnr_db);
  out->clear_imatrix_missing();
  for (std::string& n : t.missing) out->add_imatrix_missing(std::move(n));
  out->clear_imatrix_mismatched();
  for (std::string& n : t.mismatched) {
    out->add_imatrix_mismatched(std::move(n));
  }
}

}  // namespace tensormorph
