// Streaming splitter for one big JSON object whose bulk is an array of records
// ({"schema": ..., "nodes": [ {...}, {...} ], ...}): each top-level member and each element of
// the chosen array is delivered as its own text span (padded for simdjson), so a trace is never
// held in memory as a whole. Only structure is checked here (balanced brackets, strings, commas);
// the spans themselves are parsed by the caller. Errors name the file and the byte offset.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "byte_source.h"

namespace opf::chakra {

class JsonStream {
 public:
  struct Span {
    const char* data;
    size_t size;
    size_t capacity;  // readable bytes from data (>= size + simdjson padding)
    uint64_t offset;  // byte offset in the (decompressed) input
  };
  using MemberFn = std::function<void(std::string_view key, const Span& value)>;
  using ElementFn = std::function<void(const Span& element, size_t index)>;

  explicit JsonStream(ByteSource& src) : src_(src) {}

  // Walks the top-level object. Members other than `array_key` go to on_member; the elements
  // of `array_key` (which must be an array) go one by one to on_element.
  void run(std::string_view array_key, const MemberFn& on_member, const ElementFn& on_element);

 private:
  [[noreturn]] void fail(uint64_t offset, const std::string& problem) const;
  bool fill();            // more bytes; false at end of input
  bool ensure(size_t n);  // at least n bytes at pos_ (false: end of input)
  void skip_ws();
  char peek();          // '\0' at end of input
  size_t scan_value();  // length of the JSON value at pos_
  Span span(size_t len) const;
  uint64_t off() const { return base_ + pos_; }

  ByteSource& src_;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
  uint64_t base_ = 0;  // input offset of buf_[0]
  bool eof_ = false;
};

}  // namespace opf::chakra
