#include "byte_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "input_error.h"

namespace opf::chakra {

namespace {
constexpr size_t kInChunk = 1 << 18;
}

ByteSource::ByteSource(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw InputError(path_, "", std::string("cannot open: ") + std::strerror(errno));
  in_.resize(kInChunk);
  refill();
  gz_ = in_len_ >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
  if (gz_) {
    if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) throw InputError(path_, "", "zlib init failed");
    zs_init_ = true;
  }
}

ByteSource::~ByteSource() {
  if (zs_init_) inflateEnd(&zs_);
  if (fd_ >= 0) ::close(fd_);
}

bool ByteSource::refill() {
  if (raw_eof_) return false;
  raw_offset_ += in_pos_;
  if (in_pos_ < in_len_) std::memmove(in_.data(), in_.data() + in_pos_, in_len_ - in_pos_);
  in_len_ -= in_pos_;
  in_pos_ = 0;
  while (in_len_ < in_.size()) {
    ssize_t n = ::read(fd_, in_.data() + in_len_, in_.size() - in_len_);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw InputError(path_, "byte " + std::to_string(raw_offset_ + in_len_),
                       std::string("read error: ") + std::strerror(errno));
    }
    if (n == 0) {
      raw_eof_ = true;
      break;
    }
    in_len_ += size_t(n);
    if (in_len_ >= kInChunk / 2) break;
  }
  return in_len_ > 0;
}

size_t ByteSource::read(char* dst, size_t cap) {
  if (cap == 0) return 0;
  if (!gz_) {
    if (in_pos_ == in_len_ && !refill()) return 0;
    size_t n = std::min(cap, in_len_ - in_pos_);
    std::memcpy(dst, in_.data() + in_pos_, n);
    in_pos_ += n;
    out_total_ += n;
    return n;
  }
  size_t produced = 0;
  while (produced == 0) {
    if (in_pos_ == in_len_ && !refill()) {
      if (stream_end_) return 0;
      throw InputError(path_, "byte " + std::to_string(raw_offset_ + in_pos_),
                       "truncated gzip data (unexpected end of file)");
    }
    if (stream_end_) {
      // another gzip member follows (concatenated .gz); anything else is trailing garbage
      if (in_len_ - in_pos_ >= 2 && (in_[in_pos_] != 0x1f || in_[in_pos_ + 1] != 0x8b))
        throw InputError(path_, "byte " + std::to_string(raw_offset_ + in_pos_), "trailing garbage after gzip data");
      inflateReset(&zs_);
      stream_end_ = false;
    }
    zs_.next_in = in_.data() + in_pos_;
    zs_.avail_in = unsigned(in_len_ - in_pos_);
    zs_.next_out = reinterpret_cast<Bytef*>(dst);
    zs_.avail_out = unsigned(std::min<size_t>(cap, 1u << 30));
    int rc = inflate(&zs_, Z_NO_FLUSH);
    size_t used = (in_len_ - in_pos_) - zs_.avail_in;
    in_pos_ += used;
    produced = size_t(reinterpret_cast<char*>(zs_.next_out) - dst);
    if (rc == Z_STREAM_END) {
      stream_end_ = true;
    } else if (rc == Z_BUF_ERROR && used == 0 && produced == 0) {
      if (!refill()) {
        throw InputError(path_, "byte " + std::to_string(raw_offset_ + in_pos_),
                         "truncated gzip data (unexpected end of file)");
      }
    } else if (rc != Z_OK) {
      throw InputError(path_, "byte " + std::to_string(raw_offset_ + in_pos_),
                       std::string("corrupt gzip data: ") + (zs_.msg ? zs_.msg : "inflate error"));
    }
  }
  out_total_ += produced;
  return produced;
}

std::string read_all(const std::string& path) {
  ByteSource src(path);
  std::string out;
  size_t cap = 1 << 20;
  for (;;) {
    size_t old = out.size();
    out.resize(old + cap);
    size_t n = src.read(out.data() + old, cap);
    out.resize(old + n);
    if (n == 0) break;
  }
  return out;
}

}  // namespace opf::chakra
