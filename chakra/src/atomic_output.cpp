#include "atomic_output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "input_error.h"

namespace opf::chakra {

namespace {
constexpr size_t kBuf = 1 << 20;
constexpr uint64_t kPrealloc = 4 << 20;
constexpr size_t kDirect = 64 << 10;  // blocks this big are not worth copying into the buffer

bool ends_with(std::string_view s, std::string_view suf) {
  return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}
}  // namespace

AtomicOutput::AtomicOutput(std::string path) : path_(std::move(path)) {
  if (!tmp_.create(path_, 0666))
    throw InputError(path_, "", std::string("cannot create output: ") + std::strerror(errno));
  gzip_ = ends_with(path_, ".gz");
  if (gzip_ && deflateInit2(&zs_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw InputError(path_, "", "zlib init failed");
  buf_.reserve(kBuf);
}

AtomicOutput::~AtomicOutput() {
  if (gzip_) deflateEnd(&zs_);  // the temp file, unless committed, goes with tmp_
}

void AtomicOutput::write_raw(const char* p, size_t n) {
  // Preallocate ahead of the writes: with blocks already allocated, renaming over an existing
  // file does not make ext4 (auto_da_alloc) allocate and start writeback of the whole file
  // inside rename() (8 ms for 11 MB). Not supported (other filesystems): plain writes.
  if (written_ + n > reserved_ && reserved_ != UINT64_MAX) {
    uint64_t want = std::max<uint64_t>(written_ + n, reserved_ + kPrealloc);
    if (::fallocate(tmp_.fd(), FALLOC_FL_KEEP_SIZE, off_t(reserved_), off_t(want - reserved_)) == 0) reserved_ = want;
    else reserved_ = UINT64_MAX;
  }
  written_ += n;
  if (!tmp_.write_all(p, n)) throw InputError(path_, "", std::string("write failed: ") + std::strerror(errno));
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
  if (buf_.size() + bytes.size() > kBuf || (!gzip_ && bytes.size() >= kDirect)) flush_buffer();
  if (bytes.size() > kBuf || (!gzip_ && bytes.size() >= kDirect)) {
    if (!gzip_) {
      write_raw(bytes.data(), bytes.size());  // big blocks go straight to the file
      return;
    }
    buf_.assign(bytes);
    flush_buffer();
    return;
  }
  buf_.append(bytes);
}

void AtomicOutput::finish() {
  if (finished_) return;
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
  // give back the preallocated blocks beyond the end
  if (reserved_ != UINT64_MAX && reserved_ > written_ && ::ftruncate(tmp_.fd(), off_t(written_)) != 0)
    throw InputError(path_, "", std::string("truncate failed: ") + std::strerror(errno));
  if (!tmp_.close(false)) throw InputError(path_, "", std::string("close failed: ") + std::strerror(errno));
  finished_ = true;
  std::string().swap(buf_);
}

void AtomicOutput::commit() {
  finish();
  if (!tmp_.publish())
    throw InputError(path_, "", std::string("cannot rename temp file into place: ") + std::strerror(errno));
}

}  // namespace opf::chakra
