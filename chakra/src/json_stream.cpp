#include "json_stream.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "input_error.h"

namespace opf::chakra {

namespace {
constexpr size_t kChunk = 1 << 18;
constexpr size_t kPad = simdjson::SIMDJSON_PADDING;

// 0 plain, 1 quote, 2 open, 3 close
struct ClassTable {
  unsigned char c[256]{};
  constexpr ClassTable() {
    c[uint8_t('"')] = 1;
    c[uint8_t('{')] = 2;
    c[uint8_t('[')] = 2;
    c[uint8_t('}')] = 3;
    c[uint8_t(']')] = 3;
  }
};
constexpr ClassTable kClass;

// Bit masks of the quotes, backslashes and brackets in 64 bytes (bit k = byte k).
struct Block64 {
  uint64_t quote = 0, backslash = 0, open = 0, close = 0;
  explicit Block64(const char* p) {
#ifdef __SSE2__
    const __m128i q = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'), ob = _mm_set1_epi8('{');
    const __m128i cb = _mm_set1_epi8('}'), os = _mm_set1_epi8('['), cs = _mm_set1_epi8(']');
    for (size_t j = 0; j < 4; ++j) {
      __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * j));
      auto bits = [&](__m128i m) { return uint64_t(uint32_t(_mm_movemask_epi8(m))) << (16 * j); };
      quote |= bits(_mm_cmpeq_epi8(v, q));
      backslash |= bits(_mm_cmpeq_epi8(v, bs));
      open |= bits(_mm_or_si128(_mm_cmpeq_epi8(v, ob), _mm_cmpeq_epi8(v, os)));
      close |= bits(_mm_or_si128(_mm_cmpeq_epi8(v, cb), _mm_cmpeq_epi8(v, cs)));
    }
#else
    for (int k = 0; k < 64; ++k) {
      uint64_t bit = uint64_t(1) << k;
      char ch = p[k];
      if (ch == '"') quote |= bit;
      else if (ch == '\\') backslash |= bit;
      else if (ch == '{' || ch == '[') open |= bit;
      else if (ch == '}' || ch == ']') close |= bit;
    }
#endif
  }
};

// bit k = parity of the bits 0..k: 1 from an opening quote up to (not including) its closing one
uint64_t prefix_xor(uint64_t x) {
  x ^= x << 1;
  x ^= x << 2;
  x ^= x << 4;
  x ^= x << 8;
  x ^= x << 16;
  x ^= x << 32;
  return x;
}

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string describe(char c) {
  if (c == '\0') return "end of input";
  if (uint8_t(c) < 0x20 || uint8_t(c) >= 0x7f) {
    char b[8];
    std::snprintf(b, sizeof b, "0x%02x", unsigned(uint8_t(c)));
    return std::string("byte ") + b;
  }
  return std::string("'") + c + "'";
}
}  // namespace

void JsonStream::fail(uint64_t offset, const std::string& problem) const {
  throw InputError(src_.path(), "byte " + std::to_string(offset), problem);
}

bool JsonStream::fill() {
  if (eof_) return false;
  // drop consumed bytes, keep [pos_, end_)
  if (pos_ > 0) {
    std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
    base_ += pos_;
    end_ -= pos_;
    pos_ = 0;
  }
  if (buf_.size() < end_ + kChunk + kPad) buf_.resize(std::max(buf_.size() * 2, end_ + kChunk + kPad));
  size_t n = src_.read(buf_.data() + end_, buf_.size() - end_ - kPad);
  if (n == 0) {
    eof_ = true;
    return false;
  }
  end_ += n;
  return true;
}

bool JsonStream::ensure(size_t n) {
  while (end_ - pos_ < n)
    if (!fill()) return false;
  return true;
}

char JsonStream::peek() { return ensure(1) ? buf_[pos_] : '\0'; }

void JsonStream::skip_ws() {
  for (;;) {
    while (pos_ < end_ && is_ws(buf_[pos_])) ++pos_;
    if (pos_ < end_ || !fill()) return;
  }
}

// Length of the value starting at pos_ (whitespace already skipped). May call fill(), which
// moves the buffer but keeps pos_ at the value's start.
size_t JsonStream::scan_value() {
  const uint64_t start_off = off();
  char c = peek();
  if (c == '\0') fail(start_off, "unexpected end of input (truncated file?)");
  size_t i = pos_;
  if (c == '{' || c == '[' || c == '"') {
    int depth = 0;
    bool in_str = false;
    for (;;) {
      if (i >= end_) {
        size_t rel = i - pos_;
        if (!fill())
          fail(start_off, in_str ? "unterminated string (truncated file?)"
                                 : "unterminated " +
                                       std::string(c == '{'   ? "object"
                                                   : c == '[' ? "array"
                                                              : "string") +
                                       " (truncated file?)");
        i = pos_ + rel;
        continue;
      }
      // 64 bytes at a time where the block has no backslash (and none just before it): the
      // per-byte loop and a memchr per (short) string were most of this thread's time.
      if (c != '"' && i + 64 <= end_ && (i == pos_ || buf_[i - 1] != '\\')) {
        const char* b = buf_.data();
        Block64 blk(b + i);
        if (!blk.backslash) {
          uint64_t inside = prefix_xor(blk.quote) ^ (in_str ? ~uint64_t(0) : 0);
          uint64_t brackets = (blk.open | blk.close) & ~inside;
          while (brackets) {
            int k = __builtin_ctzll(brackets);
            brackets &= brackets - 1;
            if (blk.open >> k & 1) {
              ++depth;
            } else {
              --depth;
              if (depth == 0) return i + size_t(k) + 1 - pos_;
              if (depth < 0) fail(base_ + i + size_t(k), "unbalanced " + describe(b[i + size_t(k)]));
            }
          }
          in_str = inside >> 63;
          i += 64;
          continue;
        }
      }
      if (in_str) {
        const void* q = std::memchr(buf_.data() + i, '"', end_ - i);
        if (!q) {
          i = end_;
          continue;
        }
        size_t j = size_t(static_cast<const char*>(q) - buf_.data());
        size_t bs = 0;
        while (j - bs > pos_ && buf_[j - bs - 1] == '\\') ++bs;
        i = j + 1;
        if (bs % 2 == 0) {
          in_str = false;
          if (depth == 0) return i - pos_;  // a top-level string value
        }
        continue;
      }
      const char* b = buf_.data();
      const size_t lim = std::min(end_, i + 64);  // then try a block again
      while (i < lim) {
        unsigned char k = kClass.c[uint8_t(b[i])];
        if (k == 0) {
          ++i;
          continue;
        }
        if (k == 1) {
          in_str = true;
          ++i;
          break;
        }
        if (k == 2) {
          ++depth;
          ++i;
          continue;
        }
        --depth;  // k == 3
        ++i;
        if (depth == 0) return i - pos_;
        if (depth < 0) fail(base_ + i - 1, "unbalanced " + describe(b[i - 1]));
      }
    }
  }
  // scalar: up to the next delimiter
  for (;;) {
    while (i < end_) {
      char d = buf_[i];
      if (d == ',' || d == '}' || d == ']' || is_ws(d)) return i - pos_;
      ++i;
    }
    size_t rel = i - pos_;
    if (!fill()) return rel;
    i = pos_ + rel;
  }
}

JsonStream::Span JsonStream::span(size_t len) const { return Span{buf_.data() + pos_, len, buf_.size() - pos_, off()}; }

void JsonStream::run(std::string_view array_key, const MemberFn& on_member, const ElementFn& on_element) {
  skip_ws();
  char c = peek();
  if (c == '\0') fail(off(), "empty file (expected a JSON object)");
  if (c != '{') fail(off(), "expected '{' at the start of the JSON trace, found " + describe(c));
  ++pos_;
  bool first = true;
  simdjson::ondemand::parser key_parser;
  for (;;) {
    skip_ws();
    c = peek();
    if (c == '}') {
      ++pos_;
      break;
    }
    if (!first) {
      if (c != ',') fail(off(), "expected ',' or '}' after a top-level member, found " + describe(c));
      ++pos_;
      skip_ws();
      c = peek();
    }
    first = false;
    if (c != '"') fail(off(), "expected a member name, found " + describe(c));
    uint64_t key_off = off();
    size_t klen = scan_value();
    std::string key(buf_.data() + pos_ + 1, klen - 2);
    if (key.find('\\') != std::string::npos) {  // rare: let simdjson unescape
      simdjson::padded_string ps(buf_.data() + pos_, klen);
      std::string_view k;
      auto doc = key_parser.iterate(ps);
      if (doc.get_string().get(k)) fail(key_off, "invalid member name");
      key.assign(k);
    }
    pos_ += klen;
    skip_ws();
    if (peek() != ':') fail(off(), "expected ':' after member name \"" + key + "\", found " + describe(peek()));
    ++pos_;
    skip_ws();
    if (key == array_key) {
      c = peek();
      if (c != '[') fail(off(), "\"" + key + "\" must be an array, found " + describe(c));
      ++pos_;
      size_t index = 0;
      for (;;) {
        skip_ws();
        c = peek();
        if (c == ']') {
          ++pos_;
          break;
        }
        if (index > 0) {
          if (c != ',')
            fail(off(), "expected ',' or ']' after element " + std::to_string(index - 1) + " of \"" + key +
                            "\", found " + describe(c));
          ++pos_;
          skip_ws();
        }
        if (peek() == '\0') fail(off(), "unexpected end of input inside \"" + key + "\" (truncated file?)");
        size_t len = scan_value();
        on_element(span(len), index);
        pos_ += len;
        ++index;
      }
    } else {
      size_t len = scan_value();
      if (len == 0) fail(off(), "expected a value for \"" + key + "\", found " + describe(peek()));
      on_member(key, span(len));
      pos_ += len;
    }
  }
  skip_ws();
  if (peek() != '\0') fail(off(), "unexpected data after the end of the JSON object: " + describe(peek()));
}

}  // namespace opf::chakra
