#include "text_workload.h"

#include <string_view>
#include <unordered_map>

#include "byte_source.h"
#include "input_error.h"

namespace opf::chakra {

namespace {

struct TypeName {
  const char* name;
  Parallelism type;
};
constexpr TypeName kTypes[] = {
    {"MICRO", Parallelism::kMicro},
    {"DATA", Parallelism::kData},
    {"MODEL", Parallelism::kModel},
    {"HYBRID_DATA_MODEL", Parallelism::kHybridDataModel},
    {"HYBRID_MODEL_DATA", Parallelism::kHybridModelData},
    {"HYBRID_DLRM", Parallelism::kHybridDlrm},
    {"HYBRID_DLRM_ENHANCED", Parallelism::kHybridDlrmEnhanced},
};

constexpr const char* kColumnNames[] = {
    "layer name",
    "reserved",
    "forward compute time",
    "forward comm type",
    "forward comm size",
    "input-gradient compute time",
    "input-gradient comm type",
    "input-gradient comm size",
    "weight-gradient compute time",
    "weight-gradient comm type",
    "weight-gradient comm size",
    "update time",
};
constexpr size_t kColumns = 12;

// The collectives ASTRA-sim's text format names; the reference maps anything else to
// ALL_REDUCE, the default reader refuses it.
constexpr std::string_view kCommTypes[] = {"ALLREDUCE", "ALLGATHER", "ALLTOALL", "REDUCESCATTER", "NONE"};

bool is_dlrm(Parallelism p) { return p == Parallelism::kHybridDlrm || p == Parallelism::kHybridDlrmEnhanced; }

class Reader {
 public:
  Reader(const std::string& path, const TextReadOptions& opt) : path_(path), opt_(opt) {}

  TextWorkload read() {
    std::string bytes = read_all(path_);
    w_.path = path_;
    // The reference decodes strictly (UnicodeDecodeError); node names must be UTF-8 anyway.
    std::string_view body = bytes;
    if (!opt_.compat_reference && body.substr(0, 3) == "\xef\xbb\xbf") body.remove_prefix(3);
    if (size_t bad = py::invalid_utf8_at(body); bad != std::string_view::npos)
      fail(line_of(body, bad), "not valid UTF-8 (byte " + std::to_string(bad + (bytes.size() - body.size())) + ")");
    w_.input_text = py::universal_newlines(bytes);
    text_ = py::universal_newlines(body);
    lines_ = py::lines(text_);
    opt_.compat_reference ? read_compat() : read_default();
    return std::move(w_);
  }

 private:
  [[noreturn]] void fail(size_t line, const std::string& problem) const {
    throw InputError(path_ + ":" + std::to_string(line), "", problem);
  }

  static size_t line_of(std::string_view text, size_t offset) {
    // universal newlines: "\r\n" counts once
    size_t line = 1;
    for (size_t i = 0; i < offset; ++i)
      if (text[i] == '\n' || (text[i] == '\r' && !(i + 1 < offset && text[i + 1] == '\n'))) ++line;
    return line;
  }

  void set_type(std::string_view name, size_t line) {
    for (const auto& t : kTypes)
      if (name == t.name) {
        w_.type = t.type;
        w_.type_name = t.name;
        return;
      }
    std::string list;
    for (const auto& t : kTypes) list += std::string(list.empty() ? "" : ", ") + t.name;
    fail(line, "unsupported parallelism type '" + std::string(name) + "' (supported: " + list + ")");
  }

  // ---- --compat reference: the reference's reading, its failures as errors

  void read_compat() {
    auto first = lines_.empty() ? std::vector<std::string_view>{} : py::split(lines_[0]);
    if (first.empty()) fail(1, "no parallelism type on the first line");
    if (lines_.size() < 2) fail(2, "missing layer count");
    auto count = py::split(lines_[1]);
    if (count.size() != 1 || !py::parse_int(count[0], w_.header_layers))
      fail(2, "layer count '" + std::string(lines_[1]) + "' is not an integer");
    set_type(first[0], 1);
    if (is_dlrm(w_.type)) {
      if (first.size() < 2) fail(1, w_.type_name + " needs the last bottom layer after the type");
      if (!py::parse_int(first[1], w_.last_bottom_layer))
        fail(1, "last bottom layer '" + std::string(first[1]) + "' is not an integer");
      w_.has_last_bottom_layer = true;
    }
    for (size_t i = 2; i < lines_.size(); ++i) {
      auto cols = py::split(lines_[i]);
      if (cols.empty()) fail(i + 1, "blank line where a layer is expected (the default mode skips blank lines)");
      if (cols.size() < kColumns)
        fail(i + 1, "a layer needs " + std::to_string(kColumns) + " whitespace-separated columns, found " +
                        std::to_string(cols.size()));
      TextLayer l;
      l.line = i + 1;
      l.name = cols[0];
      auto num = [&](size_t c, PyInt& out) {
        if (!py::parse_int(cols[c], out))
          fail(i + 1, "column " + std::to_string(c + 1) + " (" + kColumnNames[c] + "): '" + std::string(cols[c]) +
                          "' is not an integer");
      };
      fill(l, cols, num);
      w_.layers.push_back(std::move(l));
    }
  }

  template <class Num>
  static void fill(TextLayer& l, const std::vector<std::string_view>& cols, Num&& num) {
    TextPhase* phases[] = {&l.fwd, &l.ig, &l.wg};
    for (size_t p = 0; p < 3; ++p) {
      num(2 + 3 * p, phases[p]->compute_time);
      phases[p]->comm_type = cols[3 + 3 * p];
      num(4 + 3 * p, phases[p]->comm_size);
    }
    l.update_time = cols[11];
  }

  // ---- default: strict numbers and types, blank lines skipped, layer count from the file

  void strict_int(std::string_view tok, size_t line, const std::string& what, PyInt& out) const {
    bool digits = !tok.empty();
    for (char c : tok) digits = digits && c >= '0' && c <= '9';
    if (!digits || !py::parse_int(tok, out) || !out.fits_i64())
      fail(line, what + ": '" + std::string(tok) + "' is not a non-negative decimal integer below 2^63");
  }

  void read_default() {
    std::vector<size_t> used;  // indices of non-blank lines
    for (size_t i = 0; i < lines_.size(); ++i)
      if (!py::split(lines_[i]).empty()) used.push_back(i);
    if (used.empty()) throw InputError(path_, "", "empty workload (no parallelism type)");
    w_.type_line = used[0] + 1;
    auto first = py::split(lines_[used[0]]);
    set_type(first[0], w_.type_line);
    if (is_dlrm(w_.type)) {
      if (first.size() < 2) fail(w_.type_line, w_.type_name + " needs the last bottom layer after the type");
      strict_int(first[1], w_.type_line, "last bottom layer", w_.last_bottom_layer);
      w_.has_last_bottom_layer = true;
    }
    if (used.size() < 2) fail(w_.type_line + 1, "missing layer count");
    w_.count_line = used[1] + 1;
    auto count = py::split(lines_[used[1]]);
    if (count.size() != 1) fail(w_.count_line, "expected the layer count alone on this line");
    strict_int(count[0], w_.count_line, "layer count", w_.header_layers);

    std::unordered_map<std::string, size_t> names;
    size_t extra_columns_line = 0, extra_columns_lines = 0;
    for (size_t u = 2; u < used.size(); ++u) {
      size_t line = used[u] + 1;
      auto cols = py::split(lines_[used[u]]);
      if (cols.size() < kColumns)
        fail(line, "a layer needs " + std::to_string(kColumns) + " whitespace-separated columns, found " +
                       std::to_string(cols.size()));
      if (cols.size() > kColumns && !extra_columns_lines++) extra_columns_line = line;
      TextLayer l;
      l.line = line;
      l.name = cols[0];
      auto num = [&](size_t c, PyInt& out) {
        strict_int(cols[c], line, "column " + std::to_string(c + 1) + " (" + kColumnNames[c] + ")", out);
      };
      fill(l, cols, num);
      PyInt update;
      num(11, update);
      for (size_t c : {3, 6, 9}) {
        bool known = false;
        for (auto t : kCommTypes) known = known || cols[c] == t;
        if (!known)
          fail(line, "column " + std::to_string(c + 1) + " (" + kColumnNames[c] + "): unknown comm type '" +
                         std::string(cols[c]) + "' (ALLREDUCE, ALLGATHER, ALLTOALL, REDUCESCATTER or NONE)");
      }
      auto [it, fresh] = names.emplace(l.name, line);
      if (!fresh)
        fail(line, "layer name '" + l.name + "' is already used on line " + std::to_string(it->second) +
                       " (node names would not be unique)");
      w_.layers.push_back(std::move(l));
    }
    if (w_.layers.empty()) fail(w_.count_line, "no layer lines after the layer count");
    if (extra_columns_lines)
      warn(extra_columns_line, std::to_string(extra_columns_lines) + " layer line(s) have more than " +
                                   std::to_string(kColumns) + " columns; the extra columns are ignored");
    if (w_.header_layers.huge || w_.header_layers.magnitude != w_.layers.size())
      warn(w_.count_line, "the layer count says " + w_.header_layers.token + " but the file has " +
                              std::to_string(w_.layers.size()) + " layer lines; using " +
                              std::to_string(w_.layers.size()));
  }

  void warn(size_t line, const std::string& msg) const {
    if (opt_.warn) opt_.warn(path_ + ":" + std::to_string(line) + ": " + msg);
  }

  std::string path_;
  const TextReadOptions& opt_;
  TextWorkload w_;
  std::string text_;
  std::vector<std::string_view> lines_;
};

}  // namespace

TextWorkload read_text_workload(const std::string& path, const TextReadOptions& opt) {
  return Reader(path, opt).read();
}

const char* parallelism_name(Parallelism p) {
  for (const auto& t : kTypes)
    if (t.type == p) return t.name;
  return "?";
}

}  // namespace opf::chakra
