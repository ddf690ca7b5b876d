#include "npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>

#include "opforge/error.h"

static_assert(std::endian::native == std::endian::little, "npy: the data bytes are used as stored ('<')");

namespace opf::npy {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

struct Descr {
  std::string_view text;
  DType dtype;
  bool boolean;
};
constexpr Descr kDescrs[] = {
    {"<f4", DType::f32, false}, {"<f8", DType::f64, false}, {"<f2", DType::f16, false}, {"<i8", DType::i64, false},
    {"<i4", DType::i32, false}, {"|u1", DType::u8, false},  {"|b1", DType::u8, true},
};

std::string supported_list() {
  std::string s;
  for (const Descr& d : kDescrs) {
    if (!s.empty()) s += ' ';
    s += d.text;
  }
  return s;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// The header is a Python dict literal; this reads exactly the subset NumPy writes (strings,
// True/False, tuples of non-negative ints) and reports the file offset of whatever it rejects.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, size_t base, const std::string& origin)
      : h_(text), base_(base), origin_(origin) {}

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw Error(origin_ + ": byte " + std::to_string(base_ + at) + ": " + what);
  }
  size_t pos() const { return i_; }

  void ws() {
    while (i_ < h_.size() && (h_[i_] == ' ' || h_[i_] == '\t' || h_[i_] == '\n' || h_[i_] == '\r')) ++i_;
  }
  bool at_end() const { return i_ >= h_.size(); }
  char peek() const { return at_end() ? '\0' : h_[i_]; }
  void expect(char c, const std::string& where) {
    ws();
    const std::string w = where.empty() ? "" : " " + where;
    if (at_end()) fail(i_, std::string("header ends where '") + c + "' was expected" + w);
    if (h_[i_] != c) fail(i_, std::string("expected '") + c + "'" + w + ", found '" + printable(h_[i_]) + "'");
    ++i_;
  }
  static std::string printable(char c) {
    if (c >= 0x20 && c < 0x7f) return std::string(1, c);
    char b[8];
    std::snprintf(b, sizeof b, "\\x%02x", unsigned(static_cast<unsigned char>(c)));
    return b;
  }

  std::string string_lit(const char* what) {
    ws();
    const char q = peek();
    if (q != '\'' && q != '"') fail(i_, std::string(what) + " must be a quoted string");
    const size_t start = ++i_;
    while (i_ < h_.size() && h_[i_] != q) {
      if (h_[i_] == '\\') fail(i_, std::string("escape sequences are not supported in ") + what);
      if (h_[i_] == '\n') fail(i_, std::string("unterminated string in ") + what);
      ++i_;
    }
    if (at_end()) fail(start - 1, std::string("unterminated string in ") + what);
    return std::string(h_.substr(start, i_++ - start));
  }

  bool boolean_lit(const char* what) {
    ws();
    for (const auto& [word, v] :
         {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}})
      if (h_.substr(i_, word.size()) == word) {
        i_ += word.size();
        return v;
      }
    fail(i_, std::string(what) + " must be True or False");
  }

  int64_t dim(size_t index) {
    ws();
    const size_t start = i_;
    if (peek() == '-') fail(start, "field 'shape': dim " + std::to_string(index) + " is negative");
    if (!(peek() >= '0' && peek() <= '9'))
      fail(start, "field 'shape': dim " + std::to_string(index) + " is not a non-negative integer");
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      if (__builtin_mul_overflow(v, int64_t(10), &v) || __builtin_add_overflow(v, int64_t(h_[i_] - '0'), &v))
        fail(start, "field 'shape': dim " + std::to_string(index) + " does not fit in 64 bits");
      ++i_;
    }
    return v;
  }

  // "()", "(3,)", "(3, 4)", "(3, 4,)"; "(3)" is an int in Python, not a tuple.
  std::vector<int64_t> shape_tuple() {
    ws();
    const size_t open = i_;
    if (peek() != '(') fail(i_, "field 'shape' must be a tuple such as (3, 4)");
    ++i_;
    std::vector<int64_t> dims;
    ws();
    if (peek() == ')') {
      ++i_;
      return dims;
    }
    while (true) {
      dims.push_back(dim(dims.size()));
      ws();
      if (peek() == ',') {
        ++i_;
        ws();
        if (peek() == ')') break;
        continue;
      }
      if (peek() == ')') {
        if (dims.size() == 1)
          fail(open, "field 'shape' (" + std::to_string(dims[0]) + ") is not a tuple: write (" +
                         std::to_string(dims[0]) + ",)");
        break;
      }
      if (at_end()) fail(i_, "field 'shape': header ends inside the tuple");
      fail(i_, "field 'shape': expected ',' or ')', found '" + printable(peek()) + "'");
    }
    ++i_;
    return dims;
  }

 private:
  std::string_view h_;
  size_t base_;
  const std::string& origin_;
  size_t i_ = 0;
};

uint64_t read_le(std::string_view b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t k = 0; k < n; ++k) v |= uint64_t(static_cast<unsigned char>(b[at + k])) << (8 * k);
  return v;
}

}  // namespace

int64_t Array::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string descr(const Array& a) {
  for (const Descr& d : kDescrs)
    if (d.dtype == a.dtype && d.boolean == a.boolean) return std::string(d.text);
  throw Error("npy: dtype " + std::string(dtype_name(a.dtype)) + " has no NumPy descr");
}

namespace {

// The fixed preamble: magic, version, header length. Returns where the header starts; sets hlen.
size_t read_preamble(std::string_view b, const std::string& origin, uint64_t& hlen) {
  auto fail = [&](size_t at, const std::string& what) -> void {
    throw Error(origin + ": byte " + std::to_string(at) + ": " + what);
  };
  for (size_t k = 0; k < kMagic.size(); ++k) {
    if (k >= b.size()) fail(b.size(), "file ends inside the magic string (not a .npy file)");
    if (b[k] != kMagic[k]) fail(k, "bad magic: not a .npy file (expected \\x93NUMPY)");
  }
  if (b.size() < 8) fail(b.size(), "file ends inside the format version");
  const int major = static_cast<unsigned char>(b[6]), minor = static_cast<unsigned char>(b[7]);
  if (major < 1 || major > 3 || minor != 0)
    fail(6,
         "unsupported format version " + std::to_string(major) + "." + std::to_string(minor) + " (1.0, 2.0, 3.0 are)");
  const size_t len_bytes = major == 1 ? 2 : 4, header_at = 8 + len_bytes;
  if (b.size() < header_at) fail(b.size(), "file ends inside the header length field");
  hlen = read_le(b, 8, len_bytes);
  if (hlen > b.size() - header_at)
    fail(8, "header length " + std::to_string(hlen) + " runs past the end of the file (" + std::to_string(b.size()) +
                " bytes)");
  return header_at;
}

// The header dict's three keys, each with where its value starts (for the errors about it).
struct HeaderFields {
  std::string descr_text;
  bool fortran = false;
  std::vector<int64_t> shape;
  size_t descr_at = 0, fortran_at = 0, shape_at = 0;
};

HeaderFields parse_header_dict(HeaderParser& p) {
  HeaderFields h;
  bool has_descr = false, has_fortran = false, has_shape = false;
  p.expect('{', "at the start of the header");
  while (true) {
    p.ws();
    if (p.at_end()) p.fail(p.pos(), "header ends inside the dict (no closing '}')");
    if (p.peek() == '}') break;
    const size_t key_at = p.pos();
    const std::string key = p.string_lit("a header key");
    p.expect(':', "after a header key");
    auto once = [&](bool& seen) {
      if (seen) p.fail(key_at, "duplicate key '" + key + "'");
      seen = true;
    };
    p.ws();
    if (key == "descr") {
      once(has_descr);
      h.descr_at = p.pos();
      h.descr_text = p.string_lit("field 'descr' (structured dtypes are not supported)");
    } else if (key == "fortran_order") {
      once(has_fortran);
      h.fortran_at = p.pos();
      h.fortran = p.boolean_lit("field 'fortran_order'");
    } else if (key == "shape") {
      once(has_shape);
      h.shape_at = p.pos();
      h.shape = p.shape_tuple();
    } else {
      p.fail(key_at, "unexpected key '" + key + "' (a .npy header has descr, fortran_order, shape)");
    }
    p.ws();
    if (p.peek() == ',') {
      p.expect(',', "");
      continue;
    }
    if (p.at_end()) p.fail(p.pos(), "header ends inside the dict (no closing '}')");
    if (p.peek() != '}') p.expect(',', "or '}' after the value of '" + key + "'");
  }
  const size_t close_at = p.pos();
  p.expect('}', "");
  p.ws();
  if (!p.at_end()) p.fail(p.pos(), "unexpected text after the header dict");
  if (!has_descr) p.fail(close_at, "header has no 'descr' key");
  if (!has_fortran) p.fail(close_at, "header has no 'fortran_order' key");
  if (!has_shape) p.fail(close_at, "header has no 'shape' key");
  return h;
}

// The array the header describes (dtype, shape) and its payload size in bytes.
Array describe_array(HeaderParser& p, const HeaderFields& h, int64_t& bytes) {
  Array a;
  a.shape = h.shape;
  const Descr* d = nullptr;
  for (const Descr& k : kDescrs)
    if (k.text == h.descr_text) d = &k;
  if (!d) {
    if (!h.descr_text.empty() && h.descr_text[0] == '>')
      p.fail(h.descr_at, "field 'descr' '" + h.descr_text + "' is big-endian; save the array as little-endian ('<')");
    p.fail(h.descr_at, "field 'descr' '" + h.descr_text + "' is not supported (supported: " + supported_list() + ")");
  }
  a.dtype = d->dtype;
  a.boolean = d->boolean;
  if (h.fortran && h.shape.size() > 1)
    p.fail(h.fortran_at, "field 'fortran_order' is True; save a C-ordered array (np.ascontiguousarray)");
  int64_t numel = 1;
  for (int64_t dim : h.shape)
    if (__builtin_mul_overflow(numel, dim, &numel))
      p.fail(h.shape_at, "field 'shape' " + shape_text(h.shape) + " overflows 64 bits");
  if (__builtin_mul_overflow(numel, int64_t(dtype_size(a.dtype)), &bytes))
    p.fail(h.shape_at, "field 'shape' " + shape_text(h.shape) + " needs more than 2^63 bytes");
  return a;
}

}  // namespace

Array parse(std::string_view b, const std::string& origin) {
  auto fail = [&](size_t at, const std::string& what) -> void {
    throw Error(origin + ": byte " + std::to_string(at) + ": " + what);
  };
  uint64_t hlen = 0;
  const size_t header_at = read_preamble(b, origin, hlen);
  HeaderParser p(b.substr(header_at, hlen), header_at, origin);
  const HeaderFields h = parse_header_dict(p);
  int64_t bytes = 0;
  Array a = describe_array(p, h, bytes);

  const size_t data_at = header_at + hlen;
  const uint64_t have = b.size() - data_at;
  if (have != uint64_t(bytes))
    fail(data_at, "data is " + std::to_string(have) + " bytes, but shape " + shape_text(h.shape) + " of " +
                      h.descr_text + " needs " + std::to_string(bytes));
  a.data.resize(size_t(bytes));
  if (bytes) std::memcpy(a.data.data(), b.data() + data_at, size_t(bytes));
  if (a.boolean)
    for (int64_t i = 0; i < bytes; ++i)
      if (uint8_t(a.data[size_t(i)]) > 1)
        fail(data_at + size_t(i), "element " + std::to_string(i) + " of a bool array is " +
                                      std::to_string(unsigned(a.data[size_t(i)])) + " (not 0 or 1)");
  return a;
}

Array read(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  std::string bytes;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw Error(path + ": cannot read: " + std::strerror(e));
    }
    if (n == 0) break;
    bytes.append(buf, size_t(n));
  }
  ::close(fd);
  return parse(bytes, path);
}

std::string serialize(const Array& a) {
  if (a.data.size() != size_t(a.numel()) * dtype_size(a.dtype))
    throw Error("npy: " + std::to_string(a.data.size()) + " data bytes for shape " + shape_text(a.shape));
  std::string dict = "{'descr': '" + descr(a) + "', 'fortran_order': False, 'shape': " + shape_text(a.shape) + ", }";
  // version 1.0 stores the header length in 2 bytes; 2.0 in 4 (only for huge shapes)
  size_t prefix = 10;
  size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  if (total - prefix > 0xffff) {
    prefix = 12;
    total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  }
  const size_t hlen = total - prefix;
  std::string out(kMagic);
  out += char(prefix == 10 ? 1 : 2);
  out += char(0);
  for (size_t k = 0; k < prefix - 8; ++k) out += char((hlen >> (8 * k)) & 0xff);
  out += dict;
  out.append(hlen - dict.size() - 1, ' ');
  out += '\n';
  out.append(reinterpret_cast<const char*>(a.data.data()), a.data.size());
  return out;
}

void write(const std::string& path, const Array& a) {
  const std::string bytes = serialize(a);
  // open(O_EXCL, 0666) rather than mkstemp: the file gets the umask's mode, not 0600
  static std::atomic<unsigned> counter{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
    tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) throw Error(path + ": cannot create a temp file beside it: " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(path + ": cannot write: " + std::strerror(e));
    }
    done += size_t(n);
  }
  // fsync before rename: after a crash the name holds the old file or the whole new one
  if (::fsync(fd) != 0 || ::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw Error(path + ": cannot write: " + std::strerror(e));
  }
}

}  // namespace opf::npy
