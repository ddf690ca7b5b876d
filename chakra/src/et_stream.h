// Chakra .et streams: varint32(size) ‖ message, repeated; GlobalMetadata first, then Nodes
// (docs/chakra.md §2.1). Input may be gzip-compressed (auto-detected); output is gzip iff the name ends
// in ".gz" (AtomicOutput). In compat mode a record of size 0 ends the stream, as in the
// reference Python reader; by default it is an (all-default) message, as protobuf defines it.
#pragma once

#include <google/protobuf/message.h>

#include <cstdint>
#include <string>

#include "atomic_output.h"

namespace opf::chakra {

class EtWriter {
 public:
  explicit EtWriter(AtomicOutput& out) : out_(&out), sink_(&buf_) {}
  explicit EtWriter(std::string& sink) : sink_(&sink) {}  // append records to a buffer
  void write(const google::protobuf::Message& m);

 private:
  AtomicOutput* out_ = nullptr;
  std::string buf_;
  std::string* sink_;
};

class EtReader {
 public:
  EtReader(std::string path, bool compat_reference);
  // Reads the next record into `m`; false at the end of the stream. Throws InputError
  // naming the file, the record number and byte offset on truncated or unparsable records.
  bool next(google::protobuf::Message& m);
  size_t record_index() const { return record_; }  // records read so far
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string data_;
  size_t pos_ = 0;
  size_t record_ = 0;
  bool compat_;
};

}  // namespace opf::chakra
