#include "et_stream.h"

#include "byte_source.h"
#include "input_error.h"

namespace opf::chakra {

void EtWriter::write(const google::protobuf::Message& m) {
  std::string& buf_ = *sink_;
  if (out_) buf_.clear();
  size_t size = m.ByteSizeLong();
  uint32_t v = uint32_t(size);
  while (v >= 0x80) {
    buf_.push_back(char((v & 0x7f) | 0x80));
    v >>= 7;
  }
  buf_.push_back(char(v));
  size_t head = buf_.size();
  buf_.resize(head + size);
  m.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(buf_.data() + head));
  if (out_) out_->write(buf_);
}

EtReader::EtReader(std::string path, bool compat_reference) : path_(std::move(path)), compat_(compat_reference) {
  data_ = read_all(path_);
}

bool EtReader::next(google::protobuf::Message& m) {
  if (pos_ >= data_.size()) return false;
  const size_t start = pos_;
  auto where = [&] { return "record " + std::to_string(record_) + " at byte " + std::to_string(start); };
  uint64_t size = 0;
  int shift = 0;
  for (;;) {
    if (pos_ >= data_.size()) throw InputError(path_, where(), "truncated length prefix (file cut short?)");
    uint8_t b = uint8_t(data_[pos_++]);
    if (shift < 64) size |= uint64_t(b & 0x7f) << shift;
    shift += 7;
    if (!(b & 0x80)) break;
    if (shift >= 35) throw InputError(path_, where(), "length prefix is not a valid varint32");
  }
  if (size > 0xffffffffull) throw InputError(path_, where(), "record length beyond 4 GiB");
  if (size == 0 && compat_) {  // reference reader: size 0 means end of stream
    pos_ = data_.size();
    return false;
  }
  if (size > data_.size() - pos_)
    throw InputError(path_, where(),
                     "truncated record: needs " + std::to_string(size) + " bytes, " +
                         std::to_string(data_.size() - pos_) + " left (file cut short?)");
  m.Clear();
  if (!m.ParseFromArray(data_.data() + pos_, int(size)))
    throw InputError(path_, where(), "record is not a valid " + m.GetTypeName() + " message");
  pos_ += size;
  ++record_;
  return true;
}

}  // namespace opf::chakra
