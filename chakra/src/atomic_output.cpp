#include "atomic_output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "input_error.h"

namespace opf::chakra {

namespace {
constexpr size_t kBuf = 1 << 20;

bool ends_with(std::string_view s, std::string_view suf) {
  return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}
}  // namespace

AtomicOutput::AtomicOutput(std::string path) : path_(std::move(path)) {
  tmp_ = path_ + ".tmp.XXXXXX";
  fd_ = ::mkstemp(tmp_.data());
  if (fd_ < 0) throw InputError(path_, "", std::string("cannot create output: ") + std::strerror(errno));
  // mkstemp makes 0600; give the final file the usual umask-derived mode
  mode_t um = ::umask(0);
  ::umask(um);
  ::fchmod(fd_, 0666 & ~um);
  gzip_ = ends_with(path_, ".gz");
  if (gzip_ && deflateInit2(&zs_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw InputError(path_, "", "zlib init failed");
  buf_.reserve(kBuf);
}

AtomicOutput::~AtomicOutput() {
  if (gzip_) deflateEnd(&zs_);
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicOutput::write_raw(const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw InputError(path_, "", std::string("write failed: ") + std::strerror(errno));
    }
    p += w;
    n -= size_t(w);
  }
}

void AtomicOutput::flush_buffer() {
  if (buf_.empty()) return;
  if (!gzip_) {
    write_raw(buf_.data(), buf_.size());
  } else {
    char out[1 << 16];
    zs_.next_in = reinterpret_cast<Bytef*>(buf_.data());
    zs_.avail_in = unsigned(buf_.size());
    do {
      zs_.next_out = reinterpret_cast<Bytef*>(out);
      zs_.avail_out = sizeof out;
      deflate(&zs_, Z_NO_FLUSH);
      write_raw(out, sizeof out - zs_.avail_out);
    } while (zs_.avail_out == 0);
  }
  buf_.clear();
}

void AtomicOutput::write(std::string_view bytes) {
  if (buf_.size() + bytes.size() > kBuf) flush_buffer();
  if (bytes.size() > kBuf) {
    if (!gzip_) {
      write_raw(bytes.data(), bytes.size());   // big blocks go straight to the file
      return;
    }
    buf_.assign(bytes);
    flush_buffer();
    return;
  }
  buf_.append(bytes);
}

void AtomicOutput::commit() {
  flush_buffer();
  if (gzip_) {
    char out[1 << 16];
    int rc;
    do {
      zs_.next_in = nullptr;
      zs_.avail_in = 0;
      zs_.next_out = reinterpret_cast<Bytef*>(out);
      zs_.avail_out = sizeof out;
      rc = deflate(&zs_, Z_FINISH);
      write_raw(out, sizeof out - zs_.avail_out);
    } while (rc != Z_STREAM_END);
  }
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw InputError(path_, "", std::string("close failed: ") + std::strerror(errno));
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw InputError(path_, "", std::string("cannot rename temp file into place: ") + std::strerror(errno));
  committed_ = true;
}

}  // namespace opf::chakra
